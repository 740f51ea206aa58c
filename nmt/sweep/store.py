"""statistics.json.gz beside a sweep's report: everything its statistics need, and no corpus text.

Per run: its factor levels, seed, metrics, size and cost, and the per-sentence sufficient statistics of
its test outputs (BLEU's n-gram matches and counts with the target language's tokenizer, chrF's
character and word n-gram counts). With it a finished sweep is re-reported after its run folders,
checkpoints and outputs are gone (``python sweep.py report DIR``), and the report's head ("what ran")
survives with it.
"""

import gzip
import hashlib
import json
from pathlib import Path

from nmt.data.text_io import read_lines
from nmt.metrics.randomization import METRICS, sentence_statistics
from nmt.utils.io import atomic_path

STATISTICS = "statistics.json.gz"
RECORD_KEYS = (
    "factors",
    "seed",
    "metrics",
    "report_metric",
    "epochs",
    "steps",
    "ended_by",
    "parameters",
    "wall_time_s",
    "lowercase",  # its BLEU and chrF ignore case (a model writing lowercase text)
    "bleu_tok_lc_signature",  # how its lowercased tokenised BLEU tokenised
    "scoring",  # how its final scores were made: checkpoints, search, the metrics' signatures
)


def run_key(record: dict) -> str:
    return Path(record.get("run_dir", "")).name


def load(sweep_dir: Path) -> dict:
    """The sweep's stored statistics (none yet: empty); a file that cannot be read is a ValueError naming it."""
    path = Path(sweep_dir) / STATISTICS
    if not path.is_file():
        return {"runs": {}, "facts": {}, "kept": {}}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            saved = json.load(handle)
        if not isinstance(saved, dict) or not isinstance(saved.get("runs"), dict):
            raise ValueError("not a sweep's statistics")
    except (OSError, EOFError, ValueError) as err:  # not gzip, cut short, not JSON, not ours
        raise ValueError(f"{path} cannot be read ({type(err).__name__}: {err})") from None
    return {"facts": {}, "kept": {}, **saved}


def set_aside_damaged(sweep_dir: Path) -> Path:
    """The unreadable statistics file renamed beside itself (kept, not written over); the new name."""
    path = Path(sweep_dir) / STATISTICS
    aside = path.with_name(f"{STATISTICS}.unreadable")
    number = 1
    while aside.exists():  # an earlier one kept too
        number += 1
        aside = path.with_name(f"{STATISTICS}.unreadable{number}")
    path.replace(aside)
    return aside


def save(sweep_dir: Path, runs: dict, facts: dict, kept: dict | None = None) -> None:
    """``runs``: the runs the report holds; ``kept``: stored runs whose records are not found now (a record
    deleted, a run folder moved), kept so that writing the report again loses none of their statistics."""
    with atomic_path(Path(sweep_dir) / STATISTICS) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as handle:
        json.dump({"runs": runs, "facts": facts, "kept": kept or {}}, handle, separators=(",", ":"))


def records_from(saved: dict) -> list[dict]:
    """The runs of a saved file as report records (their run folders may be gone)."""
    return [
        {**{k: entry[k] for k in RECORD_KEYS if k in entry}, "run_dir": key} for key, entry in saved["runs"].items()
    ]


def entry(record: dict, tokenize: str, saved: dict | None) -> dict:
    """The stored form of one run: its record and, when its test outputs can be read (or were stored
    before for the same outputs), their per-sentence statistics per metric."""
    stored = {k: record[k] for k in RECORD_KEYS if k in record}
    hypotheses, references = record.get("hypotheses"), record.get("references")
    if hypotheses and references and Path(hypotheses).is_file() and Path(references).is_file():
        hyps, refs = read_lines(hypotheses), read_lines(references)
        lowercase = bool(record.get("lowercase"))  # a model that writes lowercase text: scored ignoring case
        scoring = tokenize + (" lowercase" if lowercase else "")
        digest = hashlib.sha256("\n".join([scoring, *hyps, "", *refs]).encode("utf-8")).hexdigest()[:16]
        if saved and saved.get("outputs") == digest and "sentences" in saved:
            stored["sentences"] = saved["sentences"]
        else:
            stored["sentences"] = {
                metric: sentence_statistics(hyps, refs, metric, tokenize, lowercase).tolist() for metric in METRICS
            }
        stored["outputs"], stored["tokenize"] = digest, tokenize
    elif saved and "sentences" in saved:
        stored.update({k: saved[k] for k in ("sentences", "outputs", "tokenize")})
    return stored
