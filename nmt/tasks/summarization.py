"""Summarisation: translation of a long document into a short summary, with ROUGE-1/2/L beside BLEU.

The decoding constraints summarisers use (a minimum length, no repeated trigram, an output length that
does not grow with the document) are search options; ``conf/task/summarization.yaml`` sets them."""

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from nmt.metrics import ROUGE_KEYS
from nmt.tasks.base import FINAL_RESULTS
from nmt.tasks.translation import TranslationTask


class SummarizationTask(TranslationTask):
    """TranslationTask with ROUGE on in validation and test (ROUGE-L picks the best checkpoint)."""

    name = "summarization"
    report_metric = "test_rougeL"
    refuses_undecoded_validation = True  # check() below

    def __init__(
        self,
        val_search: dict | None = None,
        bleu_every_n_epochs: int = 1,
        rouge: bool = True,
        scores_in: str | None = None,
    ) -> None:
        if not rouge:
            raise ValueError("task.rouge=false: summarisation is scored by ROUGE; use task=translation instead")
        super().__init__(val_search, bleu_every_n_epochs, rouge=True, scores_in=scores_in)

    def check(self, cfg: DictConfig) -> list[str]:
        problems = super().check(cfg)
        data = OmegaConf.select(cfg, "data._target_", default=None)
        corpus = get_class(data) if data is not None else None
        if getattr(corpus, "translations", False):
            # it trained, and decoded German for "summaries" of English captions, without a word
            languages = f"{OmegaConf.select(cfg, 'data.src_lang')}-{OmegaConf.select(cfg, 'data.tgt_lang')}"
            problems.append(
                f"  task={self.name} on data={corpus.name} ({languages}): a corpus of {corpus.pairs_are}, not of "
                "documents and their summaries; give your own with experiment=summarization data.train=... "
                "(docs/tasks.md, Summarisation)"
            )
        if OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1) == 0:
            problems.append(
                "  validation.bleu_every_n_epochs=0: summarisation picks its best checkpoint by validation "
                "ROUGE, which needs decoded epochs; set it to 1 or more"
            )
        return problems

    def sweep_metrics(self, results: dict) -> dict:
        test, final = results.get("test") or {}, results.get("final_metrics") or {}
        val = results.get(FINAL_RESULTS["val"]) or {}
        return {
            **super().sweep_metrics(results),
            **{f"test_{key}": test.get(key) for key in ROUGE_KEYS},
            **{f"val_as_test_{key}": val.get(key) for key in ROUGE_KEYS},
            "best_val_rougeL": results.get("best_val_rougeL"),
            "final_val_rougeL": final.get("val_rougeL"),
        }
