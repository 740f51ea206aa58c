"""The records of a sweep's finished runs (``sweep_result.json`` in each run folder): made from a run's
results, read, limited to the sweep's plan, and the metric a report ranks them by."""

import json
import math
from pathlib import Path

from omegaconf import OmegaConf

from nmt.decoding.settings import UNREAD
from nmt.metrics.corpus import bleu_tokenizer, unsigned_tokenized_lowercase_signature
from nmt.sweep import analysis, summary
from nmt.tasks import build_task, task_config
from nmt.tasks.base import FINAL_RESULTS
from nmt.training.run_folder import in_this_folder

RESULT = "sweep_result.json"  # one run's record, written by nmt.sweep.runner.run_cell when the run has finished
RUN_FACTS = ("epochs", "steps", "ended_by", "parameters", "wall_time_s", "run_dir")  # results.csv's, after the scores


def read_record(path: Path) -> dict:
    """One run's record; a damaged one is named with what to do (the run's own results make it again). Its
    paths into the run folder it was written in are read as paths into the folder it is in: a sweep moved,
    copied or restored, and runs set aside (on_changed=move), report their own outputs and curves, never
    those of whatever run now stands at the old path."""
    try:
        record = json.loads(Path(path).read_text())
        reason = record_problem(record)
        if reason is None:
            return in_this_folder(record, Path(path).parent)
    except (OSError, ValueError) as err:
        reason = str(err)
    raise ValueError(
        f"{path} cannot be read ({reason}): remove it and rerun the sweep, which records the finished run again "
        "from its results.json without training it"
    )


# what every record holds, and of which type (a record of other contents was counted as a finished run, and
# failed later with a bare KeyError('metrics') naming no file); its run folder, where given, is a path
RECORD_KEYS = (("factors", dict), ("seed", int), ("metrics", dict))


def record_problem(record) -> str | None:
    """Why ``record`` (a record file's JSON) is not a run's record, or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    for key, kind in (*RECORD_KEYS, ("run_dir", str)):
        if key not in record and key != "run_dir":
            return f"it holds no {key!r}"
        if key in record and (not isinstance(record[key], kind) or isinstance(record[key], bool)):
            return f"its {key!r} is {record[key]!r}, not {'an' if kind is int else 'a'} {kind.__name__}"
    for name, value in record["metrics"].items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"its metric {name!r} is {value!r}, not a number"
    return None


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
    """sacreBLEU's tokenizer for the run's target language, as its test BLEU was scored: its BLEU signature's
    where recorded (a run scored under other rules, a regional code's 13a before codes were read by their
    primary subtag, keeps its own), else 'zh' for Chinese, 'ja-mecab' / 'ko-mecab' where their packages are
    installed, '13a' otherwise."""
    signature = str((record.get("scoring") or {}).get("bleu_signature") or "")
    recorded = next((part[4:] for part in signature.split("|") if part.startswith("tok:")), None)
    if recorded:
        return recorded
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


def scored_records(records: list[dict]) -> tuple[list[dict], dict[str, list[str]]]:
    """The records with only the scores a statistic can take, and, by run folder, the scores left out for
    being nan or infinite (a diverged run's loss or perplexity): such a run counts as one without that score,
    and whoever reports on them says so. A missing score (None) is left out too, as one never made."""

    def finite(value) -> bool:
        return not isinstance(value, float) or math.isfinite(value)

    kept = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if v is not None and finite(v)}} for r in records]
    unscored = {
        Path(r.get("run_dir", "")).name: sorted(k for k, v in r["metrics"].items() if not finite(v)) for r in records
    }
    return kept, {name: keys for name, keys in unscored.items() if keys}


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
        import difflib

        close = difflib.get_close_matches(metric, available, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"report_metric={metric}: no finished run has it{hint}; the runs have {available}")
    analysis.check_same_measure(records, metric)
    return metric


def run_record(run_dir: Path, factors: dict, seed: int) -> dict:
    """What a sweep keeps of a finished run: its factor levels and seed, the metrics its task reports
    (from results.json; the task is read from the run's config.yaml), size, cost and test outputs."""
    results = in_this_folder(json.loads((run_dir / "results.json").read_text()), run_dir)  # a copied folder's own
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    try:
        task = build_task(task_config(config))
    except Exception as err:  # the run itself finished and stays; only its record is missing
        raise RuntimeError(
            f"{run_dir.name}: trained, but its record could not be made ({type(err).__name__}: {err}); was the "
            "code edited while the sweep ran? Run the same sweep command again: it records the finished run "
            "from its folder without training it"
        ) from err
    test = results.get("test") or {}
    final = test or results.get(FINAL_RESULTS["val"]) or {}
    tok_lc_signature = final.get("bleu_tok_lc_signature") or results.get("bleu_tok_lc_signature")
    if tok_lc_signature is None:  # scored before the signature
        tok_lc_signature = unsigned_tokenized_lowercase_signature((config.get("data") or {}).get("tgt_lang"))
    return {
        "factors": factors,
        "seed": seed,
        "metrics": task.sweep_metrics(results),
        "report_metric": task.report_metric,
        "epochs": results["epochs"],
        "steps": results["steps"],
        "ended_by": results.get("ended_by"),  # absent from runs made before it was recorded
        "stopped_in_warmup": stopped_in_warmup(config, results),
        # its monitored score took one value at every validation: best.ckpt chosen among equals (train.py warns)
        "monitor_never_moved": results.get("monitor_never_moved"),
        "parameters": results["parameters"],
        "wall_time_s": results["wall_time_s"],  # every sitting of a run that was killed and resumed
        "run_dir": str(run_dir),
        "hypotheses": test.get("hypotheses"),
        "references": test.get("references"),
        "sources": test.get("sources"),
        # a model that writes lowercase text was scored ignoring case: its sentence statistics are too
        "lowercase": any(
            "case:lc" in str(scores.get("bleu_signature", ""))
            for scores in (test, results.get(FINAL_RESULTS["val"]) or {})
        ),
        # how its lowercased tokenised BLEU tokenised (None: recorded before the signature, hyphens split)
        "bleu_tok_lc_signature": tok_lc_signature,
        "scoring": scoring_of(final),
    }


def stopped_in_warmup(config: dict, results: dict) -> bool:
    """Whether early stopping ended the run inside its learning rate's warm-up (its patience counted from the
    start, ``early_stopping.after_warmup`` off): its rate had not peaked, so it did not converge."""
    scheduler = (config.get("optim") or {}).get("scheduler")
    warmup = scheduler.get("warmup") if isinstance(scheduler, dict) else None
    after = bool((config.get("early_stopping") or {}).get("after_warmup"))
    early = results.get("ended_by") == "early stopping"
    return bool(early and not after and isinstance(warmup, int) and results.get("steps", warmup) < warmup)


def scoring_of(scores: dict) -> dict:
    """How a run's final scores were made, from its results: the checkpoints (by name), the search and the
    metrics' signatures, so that a report can say it and see when its runs differ in it."""
    scoring: dict = {}
    names = [Path(c).name for c in scores.get("checkpoints") or []]
    if names:
        scoring["checkpoints"] = names[0] if len(names) == 1 else f"the mean of {len(names)} checkpoints"
    search = scores.get("search") or {}
    if search.get("strategy"):  # the options its strategy reads, as evaluate.py would be given them
        unread = UNREAD.get(search["strategy"], ())
        read = [f"{k}={v}" for k, v in search.items() if k != "strategy" and k not in unread and v is not None]
        scoring["search"] = " ".join([str(search["strategy"]), *read])
    scoring.update({k: v for k, v in scores.items() if k.endswith("_signature") and k != "bleu_tok_lc_signature"})
    return scoring
