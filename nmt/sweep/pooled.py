"""Several tuning sweeps of one level pooled by ``python sweep.py tune``: a candidate past the grid's edge
run as a sweep of its own, or seeds added to a candidate later, each with its own ``sweep_name``.

In one sweep a candidate is its swept values. Pooled, a candidate is told by its settings, not by its sweep:
the level's own settings (``optim.*``, or a key its config file reads) that some pooled sweep sets, swept or
held at one value, and whose value differs between the pooled runs. Each run's value is read from the
fingerprint it recorded, so a sweep that left a setting at its default ran at that default
(``optim.scheduler.factor=1.0`` beside a sweep that held it at 2.0).

Pooled runs are compared only where they were trained alike, setting by setting from their fingerprints:
- a setting that is not the level's own (the budget, the model, the corpus) must be the same in every run;
- the runs of one candidate must agree in every setting (their seeds aside);
- a level's own setting that no pooled sweep sets may differ between candidates only as a copy of one that
  does (noam's ``optim.scheduler.warmup`` is ``${warmup}``);
- the corpus text each run read must be the same, and a seed of one candidate may run once.
Runs of different code are pooled with a note naming the commits.
"""

from pathlib import Path

from omegaconf import OmegaConf

from nmt.sweep.levels import sweep_levels
from nmt.sweep.tuned import ABSENT, tuning_run


def override_text(value) -> str:
    """A recorded setting as a command line writes it (Hydra's ``null``, ``true``; ``[0.9, 0.98]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else str(value)


def pooled_candidates(sweeps: list[tuple[Path, list[dict]]], level_key: str, level: str, own) -> tuple[list, list]:
    """Every run of the pooled sweeps as (sweep folder, candidate, record), in the order given (each sweep's
    runs in its own order), the candidate a sorted tuple of (key, value) pairs; and the notes to print.
    ``own(key)`` says whether a key is a setting of the level itself. A one-line ValueError where the runs
    were not trained alike."""
    runs = []  # (sweep folder, record, its tuning_run)
    for sweep_dir, records in sweeps:
        for record in records:
            run = sweep_dir / Path(record.get("run_dir", "")).name
            found = tuning_run(run)
            if not found["config"]:
                raise ValueError(
                    f"{run}: recorded no settings (fingerprint.json): pooled tuning sweeps are compared setting by "
                    "setting; tune its sweep alone, or run it again"
                )
            runs.append((sweep_dir, record, found))
    keys = _candidate_keys(sweeps, runs, level_key, own)
    listed = []
    for sweep_dir, record, found in runs:
        setting = tuple(sorted((k, override_text(found["config"].get(k, ABSENT))) for k in keys))
        listed.append((sweep_dir, setting, record))
    _check_seeds_once(listed)
    _check_alike(listed, runs, keys, level_key, level, own)
    return listed, _code_notes(runs, level_key, level)


def _candidate_keys(sweeps, runs, level_key: str, own) -> list[str]:
    """The level's own settings some pooled sweep sets whose value differs between the pooled runs."""
    given = []
    for sweep_dir, _ in sweeps:
        for key in sweep_levels(OmegaConf.load(sweep_dir / "multirun.yaml")):
            if key not in (level_key, "seed") and own(key) and key not in given:
                given.append(key)
    return [k for k in given if len({repr(found["config"].get(k, ABSENT)) for _, _, found in runs}) > 1]


def _check_seeds_once(listed) -> None:
    """A seed of one candidate in two sweeps would count twice toward its mean."""
    seen = {}
    for sweep_dir, setting, record in listed:
        name = " ".join(f"{k}={v}" for k, v in setting) or "the one candidate"
        first = seen.setdefault((setting, str(record["seed"])), sweep_dir)
        if first != sweep_dir:
            raise ValueError(
                f"{sweep_dir}: seed {record['seed']} of {name} ran in {first} too: pooled, it would count twice "
                "toward its candidate's mean; give each seed of a candidate once (leave one of the sweeps out)"
            )


def _check_alike(listed, runs, keys, level_key: str, level: str, own) -> None:
    """Pooled runs differ only in their candidates' settings (and what copies them) and seeds."""
    configs = [found["config"] for _, _, found in runs]
    for key in sorted({k for config in configs for k in config} - set(keys)):
        values = [config.get(key, ABSENT) for config in configs]
        if len({repr(v) for v in values}) == 1:
            continue
        first, other = _two_sweeps(listed, values)
        said = f"{key} is {first[1]} in {first[0]} and {other[1]} in {other[0]}"
        if not own(key):
            raise ValueError(
                f"the pooled tuning sweeps of {level_key}={level} were not trained alike: {said}, which is not a "
                f"setting of {level_key}={level}; pool only sweeps that differ in the level's own settings"
            )
        by_candidate = {}
        for (_, setting, _), value in zip(listed, values, strict=True):
            by_candidate.setdefault(setting, set()).add(repr(value))
        if any(len(v) > 1 for v in by_candidate.values()):
            raise ValueError(
                f"the pooled runs of one candidate of {level_key}={level} differ in {key}, which no pooled sweep "
                f"sets ({said}): they were trained under other settings (other code or defaults); set it on each "
                "sweep's command line, or pool only runs made alike"
            )
        copied = any(
            all(override_text(config.get(key, ABSENT)) == override_text(config.get(k, ABSENT)) for config in configs)
            for k in keys
        )
        if not copied:
            raise ValueError(
                f"the pooled tuning sweeps of {level_key}={level} differ in {key}, which no pooled sweep sets "
                f"({said}): the candidates would differ in more than they say; set it on each sweep's command line"
            )
    texts = {repr(found.get("text")) for _, _, found in runs}
    if len(texts) > 1:
        raise ValueError(
            f"the pooled tuning sweeps of {level_key}={level} read other corpus text (the hashes their runs "
            "recorded differ): their validation scores do not compare; pool only sweeps of the same text"
        )


def _two_sweeps(listed, values) -> tuple[tuple, tuple]:
    """Two runs' (sweep folder, value) that differ, for the message."""
    first = (listed[0][0], override_text(values[0]))
    for (sweep_dir, _, _), value in zip(listed, values, strict=True):
        if repr(value) != repr(values[0]):
            return first, (sweep_dir, override_text(value))
    return first, first


def _code_notes(runs, level_key: str, level: str) -> list[str]:
    """A note where the pooled runs were trained by different code."""
    commits = {}  # the code's hash (its files, changes included): its commit and the sweeps that ran it
    for sweep_dir, _, found in runs:
        code = found.get("code") or {}
        mark = str(code.get("commit") or "unrecorded")[:7] + (" with changes" if code.get("dirty") else "")
        dirs = commits.setdefault(code.get("hash") or mark, (mark, []))[1]
        if str(sweep_dir) not in dirs:
            dirs.append(str(sweep_dir))
    if len(commits) < 2:
        return []
    said = "; ".join(f"{mark} in {', '.join(dirs)}" for mark, dirs in commits.values())
    return [
        f"note: the pooled runs of {level_key}={level} were trained by different code ({said}): the comparison "
        "takes the changes between them to compute the same"
    ]
