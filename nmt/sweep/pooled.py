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
- the corpus text each run read must be the same, the metric scored alike, and a seed of one candidate may
  run once.
Values compare as the sweeps' levels do (``2`` and ``2.0`` are one value), and a setting recorded as null
compares alike with one that newer code no longer records. Runs of different code are pooled with a note
naming the commits, and candidates that ran different seeds with a note: one sweep compares them seed for
seed, pooled ones may not.
"""

import json
import re
from pathlib import Path

from omegaconf import OmegaConf

from nmt.sweep.levels import BATCHES_OR_SHARE, hydra_quoted, plain_settings, sweep_levels
from nmt.sweep.summary import planned
from nmt.sweep.tuned import ABSENT, tuning_run

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./:-]*")  # a string Hydra reads back as the same string, unquoted


def override_text(value) -> str:
    """A recorded setting as a command line writes it, read back as the same value (Hydra's ``null`` and
    ``true``, a list as ``[0.9, 0.98]``, a string quoted where it would read as another type or a sweep)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in ("true", "false", "null", "none", "inf", "nan")
        return value if plain else hydra_quoted(value)
    return str(value)


def _same_value(value, key: str):
    """What a recorded value is for comparing: numbers by value (2 and 2.0 alike, but where Lightning reads an
    int as batches and a float as a share), null and absent alike (a key newer code no longer records)."""
    if value is None or value == ABSENT:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value), isinstance(value, int) if key in BATCHES_OR_SHARE else None)
    return ("text", json.dumps(value, sort_keys=True, default=str))


def pooled_candidates(sweeps: list[tuple[Path, list[dict]]], level_key: str, level: str, own) -> tuple[list, list]:
    """Every run of the pooled sweeps as (sweep folder, candidate, record), in the order given (each sweep's
    runs in its own order), the candidate a sorted tuple of (key, value as first written) pairs; and the
    notes to print. ``own(key)`` says whether a key is a setting of the level itself. A one-line ValueError
    where the runs were not trained alike."""
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
    keys = [k for k in _keys_set(sweeps, level_key, level, own) if len(_values(runs, k)) > 1]
    shown = {k: _values(runs, k) for k in keys}  # each value of a candidate key, as first recorded
    listed = []
    for sweep_dir, record, found in runs:
        value = found["config"].get
        setting = tuple(sorted((k, shown[k][_same_value(value(k, ABSENT), k)]) for k in keys))
        listed.append((sweep_dir, setting, record))
    _check_seeds_once(listed)
    _check_alike(listed, runs, keys, level_key, level, own)
    return listed, _code_notes(runs, level_key, level) + _seed_notes(listed, level_key, level)


def chosen_overrides(sweep_dir: Path, setting: tuple, record: dict, written: list[str], level_key: str) -> list[str]:
    """The winning candidate's settings as overrides a factorial loads: each as its own sweep wrote it where it
    did (``+key=``, ``~key`` kept; ``written``: what it held and its level_settings gave), else the value its
    run recorded; a key its run did not have is left out."""
    found = tuning_run(sweep_dir / Path(record.get("run_dir", "")).name)["config"]
    swept = signs(sweep_dir)
    by_key = {o.lstrip("+~").partition("=")[0]: o for o in written}
    overrides = []
    for key, _ in setting:
        value = found.get(key, ABSENT)
        if key in by_key:
            overrides.append(by_key[key])
        elif value == ABSENT:
            continue
        else:
            overrides.append(f"{swept.get(key, '')}{key}={override_text(value)}")
    return overrides


def signs(sweep_dir: Path) -> dict[str, str]:
    """Each key a sweep sets (command line or grid) with the sign it was written with: ``+`` for a key it adds
    (``+optim.optimizer.amsgrad=true,false``), which a factorial must add too; ``""`` for most (and for all
    where the sweep saved no multirun.yaml)."""
    if not (sweep_dir / "multirun.yaml").is_file():
        return {}
    saved = _saved(sweep_dir)
    given = [*saved.hydra.overrides.task, *(saved.hydra.sweeper.get("params") or {})]
    return {o.lstrip("+~").partition("=")[0]: o[: len(o) - len(o.lstrip("+~"))] for o in given}


def _saved(sweep_dir: Path):
    return OmegaConf.load(sweep_dir / "multirun.yaml")


def _keys_set(sweeps, level_key: str, level: str, own) -> list[str]:
    """The level's own settings that some pooled sweep sets: swept, held, or given by its level_settings."""
    given = []
    for sweep_dir, _ in sweeps:
        keys = list(sweep_levels(_saved(sweep_dir)))
        settings = plain_settings(planned(sweep_dir).get("level_settings"))
        for by_level in settings.values() if isinstance(settings, dict) else ():
            for overrides in (by_level or {}).values():
                keys += [str(o).lstrip("+~").partition("=")[0] for o in overrides]
        for key in keys:
            key = key.lstrip("+~")
            if key not in (level_key, "seed") and own(key) and key not in given:
                given.append(key)
    return given


def _values(runs, key: str) -> dict:
    """The distinct values of ``key`` among the runs (as compared), each as first recorded and written."""
    values = {}
    for _, _, found in runs:
        value = found["config"].get(key, ABSENT)
        values.setdefault(_same_value(value, key), ABSENT if value == ABSENT else override_text(value))
    return values


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
        values = [_same_value(config.get(key, ABSENT), key) for config in configs]
        if len(set(values)) == 1:
            continue
        said = _two_runs(runs, key, values)
        if not own(key):
            raise ValueError(
                f"the pooled tuning sweeps of {level_key}={level} were not trained alike: {said}, which is not a "
                f"setting of {level_key}={level}; pool only sweeps that differ in the level's own settings"
            )
        by_candidate = {}
        for (_, setting, _), value in zip(listed, values, strict=True):
            by_candidate.setdefault(setting, set()).add(value)
        if any(len(v) > 1 for v in by_candidate.values()):
            raise ValueError(
                f"the pooled runs of one candidate of {level_key}={level} differ in {key}, which no pooled sweep "
                f"sets ({said}): they were trained under other settings; set it on each sweep's command line, or "
                "pool only runs made alike"
            )
        copied = any(  # noam's optim.scheduler.warmup, ${warmup}: a copy of a set key differs as it does
            all(
                _same_value(config.get(key, ABSENT), key) == _same_value(config.get(k, ABSENT), key)
                for config in configs
            )
            for k in keys
        )
        if not copied:
            raise ValueError(
                f"the pooled tuning sweeps of {level_key}={level} differ in {key}, which no pooled sweep sets "
                f"({said}): the candidates would differ in more than they say; set it on each sweep's command line"
            )
    if len({repr(found.get("text")) for _, _, found in runs}) > 1:
        raise ValueError(
            f"the pooled tuning sweeps of {level_key}={level} read other corpus text (the hashes their runs "
            "recorded differ): their validation scores do not compare; pool only sweeps of the same text"
        )


def _two_runs(runs, key: str, values) -> str:
    """Two runs that differ in ``key``, for the message; with their code where it differs too."""
    first = next(i for i, v in enumerate(values) if v != values[0]) if len(set(values)) > 1 else 0
    (a_dir, _, a), (b_dir, _, b) = runs[0], runs[first]
    text = lambda found: override_text(found["config"].get(key)) if key in found["config"] else ABSENT  # noqa: E731
    said = f"{key} is {text(a)} in {a_dir} and {text(b)} in {b_dir}"
    if (a.get("code") or {}).get("hash") != (b.get("code") or {}).get("hash"):
        said += " (their code differs: a default changed?)"
    return said


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
        f"note: the pooled runs of {level_key}={level} were trained by different code ({said}): their comparison "
        "holds only if the changes between them leave results alone"
    ]


def _seed_notes(listed, level_key: str, level: str) -> list[str]:
    """A note where pooled candidates ran different seeds: compared on other seeds, not seed for seed."""
    seeds = {}
    for _, setting, record in listed:
        seeds.setdefault(setting, set()).add(str(record["seed"]))
    if len({frozenset(v) for v in seeds.values()}) < 2:
        return []
    said = "; ".join(
        f"{' '.join(f'{k}={v}' for k, v in setting) or 'the one candidate'}: "
        + ", ".join(sorted(ran, key=lambda s: (len(s), s)))
        for setting, ran in seeds.items()
    )
    return [
        f"note: the pooled candidates of {level_key}={level} ran different seeds ({said}): each is compared on its "
        "own seeds (Welch's test), not seed for seed as in one sweep; run the seeds they lack to compare them alike"
    ]
