"""Scores of decoded text: sacreBLEU BLEU and chrF, ROUGE, bootstrap intervals and the paired approximate
randomisation test."""

import math

# metric names ending so improve downwards: the one rule that checkpointing, early stopping, the sweep's
# ranking and the tuning of levels all read (a new metric that falls as it improves needs its suffix here)
LOWER_IS_BETTER = ("ppl", "loss", "ter", "wer", "cer")
# the ROUGE variants every ROUGE score reports (F-measures)
ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


def lower_is_better(metric: str) -> bool:
    """Perplexities, losses and error rates (TER, WER, CER) improve downwards; BLEU, chrF, ROUGE and
    accuracies upwards."""
    return metric.endswith(LOWER_IS_BETTER)


def metric_range(metric: str) -> tuple[float, float]:
    """The values ``metric`` can take, by its name's ending: 0 to 100 for BLEU, chrF, ROUGE and word accuracy
    (transliteration's, a percentage: ``word_acc``), as this project reports them; 0 to 1 for other accuracies, at
    least 1 for perplexities, at least 0 for losses and error rates; unbounded for a name it does not know. A 95%
    interval over seeds reaching past these bounds says the t interval does not describe the seeds' scores (too
    few of them, or one far from the others)."""
    name = metric.removesuffix("_tok_lc")
    if name.endswith(("bleu", "chrf", *ROUGE_KEYS, "word_acc")):
        return 0.0, 100.0
    if name.endswith("acc"):
        return 0.0, 1.0
    if name.endswith("ppl"):
        return 1.0, math.inf
    if name.endswith(LOWER_IS_BETTER):
        return 0.0, math.inf
    return -math.inf, math.inf
