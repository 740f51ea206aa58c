"""The records of a sweep's finished runs (``sweep_result.json`` in each run folder): read, limited to the
sweep's plan, and the metric a report ranks them by."""

import json
from pathlib import Path

from omegaconf import OmegaConf

from nmt.metrics.corpus import bleu_tokenizer
from nmt.sweep import analysis, summary

RESULT = "sweep_result.json"  # one run's record, written by nmt.sweep.runner.run_cell when the run has finished


def read_record(path: Path) -> dict:
    """One run's record; a damaged one is named with what to do (the run's own results make it again)."""
    try:
        record = json.loads(Path(path).read_text())
        if isinstance(record, dict):
            return record
        reason = "not a JSON object"
    except (OSError, ValueError) as err:
        reason = str(err)
    raise ValueError(
        f"{path} cannot be read ({reason}): remove it and rerun the sweep, which records the finished run again "
        "from its results.json without training it"
    )


def finished_runs(sweep_dir: Path) -> tuple[list[Path], list[str]]:
    """The record files of the sweep's finished runs (not those set aside as superseded), and the names of
    finished run folders that this sweep's plan does not hold: runs of an earlier sweep in the same folder
    (other levels, seeds), which its report leaves out."""
    kept, others = summary.of_plan(sweep_dir, [p.parent.name for p in sorted(Path(sweep_dir).glob(f"*/{RESULT}"))])
    return [Path(sweep_dir) / name / RESULT for name in kept], others


def collect_records(sweep_dir: Path) -> list[dict]:
    """The records of the planned runs of the sweep that have finished (see :func:`finished_runs`)."""
    return [read_record(p) for p in finished_runs(sweep_dir)[0]]


def bleu_tokenize(record: dict) -> str:
    """sacreBLEU's tokenizer for the run's target language, as its test BLEU was scored ('zh' for Chinese,
    'ja-mecab' / 'ko-mecab' where their packages are installed, '13a' otherwise)."""
    config = Path(record.get("run_dir", "")) / "config.yaml"
    try:
        lang = OmegaConf.select(OmegaConf.load(config), "data.tgt_lang") if config.is_file() else None
    except Exception as err:  # noqa: BLE001 - one run's damaged record: named, its statistics tokenised as 13a
        print(f"warning: {config} cannot be read ({type(err).__name__}); its outputs' sentence statistics use 13a")
        lang = None
    try:
        return bleu_tokenizer(lang) if lang else "13a"
    except ValueError as err:  # a run scored before its language needed MeCab can still be re-reported
        print(f"warning: {err}; the sentence-level statistics of {lang} outputs use 13a")
        return "13a"


def resolve_metric(metric: str, records: list[dict]) -> str:
    """``auto``: the metric the runs' task ranks by (recorded with each run). A metric that no run has is
    an error listing those that some run has."""
    available = sorted({m for r in records for m, v in r["metrics"].items() if v is not None})
    if metric == "auto":
        recorded = {r["report_metric"] for r in records if r.get("report_metric")}
        if len(recorded) > 1:
            raise ValueError(
                f"report_metric=auto: the runs' tasks rank by different metrics {sorted(recorded)}; name one"
            )
        # records written before runs recorded their task's metric
        metric = recorded.pop() if recorded else ("test_ppl" if "test_ppl" in available else "test_bleu")
    if metric not in available:
        raise ValueError(f"report_metric={metric}: no finished run has it; the runs have {available}")
    analysis.check_same_measure(records, metric)
    return metric
