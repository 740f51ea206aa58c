"""Scores of decoded text: sacreBLEU BLEU and chrF, ROUGE, bootstrap intervals and the paired bootstrap test."""

# metric names ending so improve downwards: the one rule that checkpointing, early stopping, the sweep's
# ranking and the tuning of levels all read (a new metric that falls as it improves needs its suffix here)
LOWER_IS_BETTER = ("ppl", "loss", "ter", "wer", "cer")


def lower_is_better(metric: str) -> bool:
    """Perplexities, losses and error rates (TER, WER, CER) improve downwards; BLEU, chrF, ROUGE and
    accuracies upwards."""
    return metric.endswith(LOWER_IS_BETTER)
