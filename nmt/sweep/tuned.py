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

from nmt.sweep.levels import plain_settings, sweep_levels
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
    code = (saved or {}).get("code") or {}
    choices = {}
    hydra = run_dir / ".hydra" / "hydra.yaml"
    if hydra.is_file():
        found = OmegaConf.select(OmegaConf.load(hydra), "hydra.runtime.choices", default=None) or {}
        choices = {str(g): str(v) for g, v in found.items() if not str(g).startswith("hydra")}
    return {"run": run_dir.name, "config": config, "choices": choices, "code": code}


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


def tuned_differences(tuned: dict, config: DictConfig, factors: list[str]) -> tuple[dict, dict]:
    """For each level this sweep runs with the file's settings, how its run here differs from the tuning run
    that chose them: the run composed with the level, its settings and the tuning's values of this sweep's
    other factors (where the sweep has them), compared setting by setting, the seed aside, and the code.
    ({"optim=noam": ["key: X in tuning, Y here", ...]}, {"optim=adamw": "why it was not compared"})."""
    from nmt.training.run_folder import code_version

    levels = sweep_levels(config)
    base = planned_values(config)[0]
    settings = plain_settings(config.get("level_settings"))
    under = tuned.get("under") or {}
    differs, unchecked = {}, {}
    for level_key, by_level in settings.items():
        for level, overrides in by_level.items():
            name = f"{level_key}={level}"
            run = (under.get(level_key) or {}).get(level)
            if level not in levels.get(level_key, []):
                continue  # a level this sweep does not run
            if run is None:
                unchecked[name] = "its settings are not a tuning's choice this file records (written by hand?)"
                continue
            if not run.get("config"):
                unchecked[name] = f"its tuning run ({run.get('run', '?')}) recorded no settings"
                continue
            values, said = {**base, level_key: level}, []
            for factor in factors:  # the cell of the tuning's other settings, where this sweep runs it
                if factor in (level_key, "seed"):
                    continue
                held = run.get("choices", {}).get(factor, run["config"].get(factor))
                held = held if held is None or isinstance(held, str) else json.dumps(held)
                if held in levels[factor]:
                    values[factor] = held
                else:  # tuned at a level this sweep does not run (or at no option of the group)
                    said.append(f"{factor}: {held} in tuning, not a level here ({', '.join(levels[factor])})")
            try:
                here = expected_fingerprint(run_overrides(config, values))["config"]
            except Exception as err:  # noqa: BLE001 - said, and the sweep decides nothing on it
                first = str(err).splitlines()[0] if str(err) else type(err).__name__
                unchecked[name] = f"its run here cannot be composed to compare ({first})"
                continue
            here = json.loads(json.dumps(here, default=str))  # as the file holds the tuning's: JSON values
            own = {str(o).lstrip("+~").partition("=")[0] for o in overrides}
            for key in sorted(set(run["config"]) | set(here)):
                if key != "seed" and run["config"].get(key, _ABSENT) != here.get(key, _ABSENT):
                    edited = " (a level setting: not the value its tuning chose)" if key in own else ""
                    said.append(f"{key}: {_shown(run['config'], key)} in tuning, {_shown(here, key)} here{edited}")
            before, now = run.get("code") or {}, code_version()
            if before.get("hash") and before.get("hash") != now.get("hash"):
                commits = f"commit {before.get('commit', '?')[:12]} -> {now.get('commit', '?')[:12]}"
                said.append(f"code: the source of nmt/ or conf/ changed since the tuning ({commits})")
            if said:
                differs[name] = said
    return differs, unchecked


def _shown(config: dict, key: str) -> str:
    return json.dumps(config[key]) if key in config and not isinstance(config[key], str) else config.get(key, _ABSENT)


def reused_seeds(tuned: dict, config: DictConfig) -> list[str]:
    """This sweep's seeds that the tuning sweeps also ran: a run at a tuned setting with one of them may repeat
    the tuning run whose validation score chose that setting."""
    tuning = {str(s) for by in (tuned.get("under") or {}).values() for run in by.values() for s in run.get("seeds", [])}
    here = sweep_levels(config).get("seed") or [str(OmegaConf.select(config, "seed", default=""))]
    return sorted(tuning & set(here), key=lambda s: (len(s), s))
