"""A tuned file (``conf/tuned/<name>.yaml``, written by ``python sweep.py tune --out``) and the sweep that
loads it (``+tuned=<name>``).

The file holds each level's chosen settings (``level_settings``), the command and candidates that chose
them, and what each level was tuned under: the config of the tuning run that won (every setting that
changes a result, the seed aside) and its config groups. Before a factorial that loads the file starts,
its own run of each tuned level, at the tuning's values of its other factors, is composed and compared
with that config setting by setting: a budget, stopping rule, corpus, model or precision that differs is
said before anything trains, and in the report.
"""

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.sweep.levels import sweep_levels
from nmt.sweep.plan import expected_fingerprint, planned_values, run_overrides

CONF = Path(__file__).resolve().parents[2] / "conf"
UNDER = "tuned under: "  # the file's comment line that records what each level was tuned under, as JSON
_ABSENT = "(absent)"


def tuning_run(run_dir: Path) -> dict:
    """What a tuning run trained with, as its folder recorded it: its config (the fingerprint's: every
    setting that changes a result; the seed left out) and its config groups."""
    from nmt.training.run_folder import RunFolderError, saved_fingerprint

    try:
        saved, _ = saved_fingerprint(run_dir, force=True)
    except RunFolderError:
        saved = None
    config = {k: v for k, v in ((saved or {}).get("config") or {}).items() if k != "seed"}
    choices = {}
    hydra = run_dir / ".hydra" / "hydra.yaml"
    if hydra.is_file():
        found = OmegaConf.select(OmegaConf.load(hydra), "hydra.runtime.choices", default=None) or {}
        choices = {str(g): str(v) for g, v in found.items() if not str(g).startswith("hydra")}
    return {"run": run_dir.name, "config": config, "choices": choices}


def write_tuned_file(path: str | Path, settings: dict, notes: list[str], under: dict) -> None:
    """The config ``+tuned=<name>`` loads: the settings, with the notes (command, candidates) and what each
    level was tuned under as comments, which a sweep that loads it checks and its report quotes."""
    from nmt.utils.io import atomic_write_text

    body = OmegaConf.to_yaml(OmegaConf.create({"level_settings": settings}))
    head = "".join(f"# {line}\n" for line in notes if line.strip())
    context = f"# {UNDER}{json.dumps(under, sort_keys=True)}\n" if under else ""
    atomic_write_text(Path(path), f"# @package _global_\n{head}{body}{context}")


def tuned_file(config: DictConfig) -> dict | None:
    """The tuned file a sweep's level settings came from (``+tuned=<name>``), read: None without one."""
    name = OmegaConf.select(config, "hydra.runtime.choices.tuned", default=None)
    path = CONF / "tuned" / f"{name}.yaml"
    return read_tuned_file(path) if name and path.is_file() else None


def read_tuned_file(path: Path) -> dict:
    """A tuned file's name, the notes ``tune`` wrote above its settings (its command, the candidates' table
    and its notes on them), and what each level was tuned under (absent from a file written by hand)."""
    notes = [line[2:].rstrip() for line in path.read_text().splitlines() if line.startswith("# ")]
    tuned = {"name": path.stem, "notes": [n for n in notes if not n.startswith(("@package", UNDER))]}
    for line in notes:
        if line.startswith(UNDER):
            try:
                tuned["under"] = json.loads(line.removeprefix(UNDER))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: its '# {UNDER}' line is not JSON ({err}); write the file again") from None
    return tuned


def tuned_differences(tuned: dict, config: DictConfig, factors: list[str]) -> dict[str, list[str]]:
    """For each tuned level this sweep runs, how its run here differs from the tuning run that chose the
    level's settings: the run composed with the level, its settings and the tuning's values of this sweep's
    other factors, compared setting by setting (the seed aside). {"optim=noam": ["key: X in tuning, Y here"]}."""
    levels = sweep_levels(config)
    base = planned_values(config)[0]
    differs = {}
    for level_key, by_level in (tuned.get("under") or {}).items():
        for level, run in by_level.items():
            name = f"{level_key}={level}"
            if level not in levels.get(level_key, []):
                continue  # a level this sweep does not run
            if not run.get("config"):
                differs[name] = [f"its tuning run ({run.get('run', '?')}) recorded no settings: not checked"]
                continue
            values = {**base, level_key: level}
            for factor in factors:  # the cell of the tuning's other settings, whether or not this sweep has it
                held = run.get("choices", {}).get(factor, run["config"].get(factor))
                if factor not in (level_key, "seed") and held is not None:
                    values[factor] = held if isinstance(held, str) else json.dumps(held)
            try:
                here = expected_fingerprint(run_overrides(config, values))["config"]
            except Exception as err:  # noqa: BLE001 - said, and the sweep decides nothing on it
                first = str(err).splitlines()[0] if str(err) else type(err).__name__
                differs[name] = [f"its run here cannot be composed to compare ({first})"]
                continue
            here = json.loads(json.dumps(here, default=str))  # as the file holds the tuning's: JSON values
            said = [
                f"{key}: {_shown(run['config'], key)} in tuning, {_shown(here, key)} here"
                for key in sorted(set(run["config"]) | set(here))
                if key != "seed" and run["config"].get(key, _ABSENT) != here.get(key, _ABSENT)
            ]
            if said:
                differs[name] = said
    return differs


def _shown(config: dict, key: str) -> str:
    return json.dumps(config[key]) if key in config and not isinstance(config[key], str) else config.get(key, _ABSENT)


def reused_seeds(tuned: dict, config: DictConfig) -> list[str]:
    """This sweep's seeds that the tuning sweeps also ran: a run at a tuned setting with one of them may repeat
    the tuning run whose validation score chose that setting."""
    tuning = {str(s) for by in (tuned.get("under") or {}).values() for run in by.values() for s in run.get("seeds", [])}
    here = sweep_levels(config).get("seed") or [str(OmegaConf.select(config, "seed", default=""))]
    return sorted(tuning & set(here), key=lambda s: (len(s), s))
