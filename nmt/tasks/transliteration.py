"""Transliteration: character-level sequence transduction (a name from one script into another, a word into its
phonemes), scored by character error rate and word accuracy rather than BLEU.

- CER: the character edit distance (Levenshtein: substitutions, insertions, deletions) of every output to its
  reference, summed over the set, over the references' characters, x100 (lower is better; above 100 where
  outputs insert more than the references hold). Spaces are characters. torchmetrics' ``CharErrorRate``
  computes it, in validation (its sums synchronised across processes) and in the final scores alike.
- WER: the same over space-separated tokens (edits of tokens over the references' tokens, x100): for outputs
  spelt as phonemes with spaces between them (grapheme-to-phoneme), the phoneme error rate (PER) of G2P papers.
  torchmetrics' ``WordErrorRate``, in validation and the final scores alike.
- word accuracy: the percentage of outputs equal to their reference as a whole (x100, higher is better), the
  ACC of the NEWS transliteration shared tasks (one reference per source here).

It is translation in all else (any parallel corpus, the encoder-decoder models, the searches, evaluate.py's
options), so BLEU and chrF are still computed beside them; ``val_cer`` picks the best checkpoint, drives
early stopping, and ``test_cer`` ranks a sweep's cells (``conf/task/transliteration.yaml``)."""

from omegaconf import DictConfig, OmegaConf
from torch import nn

from nmt.metrics.corpus import transliteration_scores  # the final scores', and the score command's
from nmt.tasks.base import FINAL_RESULTS, best_logged, exact_sum
from nmt.tasks.translation import TranslationTask

SCORES = ("cer", "wer", "word_acc")


class TransliterationTask(TranslationTask):
    """TranslationTask scored by CER (``val_cer``: the best checkpoint, early stopping, the sweep's ranking)
    WER (``val_wer``) and word accuracy (``val_word_acc``) of decoded outputs."""

    name = "transliteration"
    report_metric = "test_cer"
    refuses_undecoded_validation = True  # check() below
    decoded_metrics = (*TranslationTask.decoded_metrics, "val_cer", "val_wer", "val_word_acc")
    score_rows = (
        ("cer", "CER (lower is better)"),
        ("wer", "WER, of space-separated tokens: phonemes' PER (lower is better)"),
        ("word_acc", "word accuracy"),
    )

    def __init__(
        self,
        val_search: dict | None = None,
        bleu_every_n_epochs: int = 1,
        scores_in: str | None = None,
    ) -> None:
        super().__init__(val_search, bleu_every_n_epochs, rouge=False, scores_in=scores_in)

    def check(self, cfg: DictConfig) -> list[str]:
        problems = super().check(cfg)
        if OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1) == 0:
            problems.append(
                "  validation.bleu_every_n_epochs=0: transliteration picks its best checkpoint by validation CER, "
                "which needs decoded epochs; set it to 1 or more"
            )
        return problems

    def validation_metric_names(self) -> set[str]:
        return {*super().validation_metric_names(), "val_cer", "val_wer", "val_word_acc"}

    def validation_metrics(self, datamodule) -> nn.ModuleDict:
        from torchmetrics.text import CharErrorRate, WordErrorRate

        metrics = super().validation_metrics(datamodule)
        metrics["cer"] = CharErrorRate()  # sums of edits and of reference characters: a corpus-level rate
        metrics["wer"] = WordErrorRate()  # the same over space-separated tokens
        metrics["words_exact"], metrics["words"] = exact_sum(), exact_sum()
        return metrics

    def update_decoded_metrics(self, metrics, hypotheses, references) -> None:
        super().update_decoded_metrics(metrics, hypotheses, references)
        metrics["cer"].update(hypotheses, references)
        metrics["wer"].update(hypotheses, references)
        metrics["words_exact"].update(sum(h == r for h, r in zip(hypotheses, references, strict=True)))
        metrics["words"].update(len(references))

    def log_decoded_metrics(self, module, metrics) -> None:
        super().log_decoded_metrics(module, metrics)
        module.log("val_cer", metrics["cer"].compute() * 100, prog_bar=True)
        module.log("val_wer", metrics["wer"].compute() * 100)
        module.log("val_word_acc", 100 * metrics["words_exact"].compute() / metrics["words"].compute().clamp(min=1))

    def extra_scores(self, hypotheses, references) -> dict:
        return transliteration_scores(hypotheses, references)

    def results_from_log(self, csv_log) -> dict:
        # the monitored metric's best is results.json's best_val_cer already (the checkpoint callback's);
        # word accuracy at its best over the run, beside it
        best = {name: best_logged(csv_log, f"val_{name}") for name in ("wer", "word_acc")}
        return {
            **super().results_from_log(csv_log),
            **{f"best_val_{name}": value for name, value in best.items() if value is not None},
        }

    def sweep_metrics(self, results: dict) -> dict:
        test, final = results.get("test") or {}, results.get("final_metrics") or {}
        val = results.get(FINAL_RESULTS["val"]) or {}
        return {
            **{f"test_{key}": test.get(key) for key in SCORES},
            **{f"val_as_test_{key}": val.get(key) for key in SCORES},
            "best_val_cer": results.get("best_val_cer"),
            "best_val_wer": results.get("best_val_wer"),
            "best_val_word_acc": results.get("best_val_word_acc"),
            "final_val_cer": final.get("val_cer"),
            "final_val_wer": final.get("val_wer"),
            "final_val_word_acc": final.get("val_word_acc"),
            **super().sweep_metrics(results),
        }
