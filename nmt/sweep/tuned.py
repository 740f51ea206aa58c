"""A tuned file (``conf/tuned/<name>.yaml``, written by ``python sweep.py tune --out``) and the sweep that
loads it (``+tuned=<name>``).

The file holds each level's chosen settings (``level_settings``), the command and candidates that chose
them, and what each level was tuned under: the config of the tuning run that won (every setting that
changes a result, the seed aside), its config groups and the hashes of its corpus's text. Before a
factorial that loads the file starts, its own run of each tuned level, at the tuning's values of its other
factors, is composed and compared with that config setting by setting, and the text it would read with the
tuning's: a budget, stopping rule, corpus, model or precision that differs, or another copy of the corpus,
is said before anything trains, and in the report.
"""

import functools
import json
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.sweep.levels import expand, plain_settings, runs_level, same_level, sweep_levels
from nmt.sweep.plan import compose_train, expected_fingerprint, planned_values, run_overrides
from nmt.sweep.tuned_source import shown_path, tuned_path

UNDER = "tuned under: "  # the file's comment line that records what each level was tuned under, as JSON
# a file written by hand may name some settings its tuning ran with (the corpus, the budget), as JSON: those
# are compared with the sweep's, where the full record of UNDER is missing
BY_HAND = "tuned under, by hand: "
# settings that change what a run scores after training, not how it trains or what validation chooses: a tuning
# sweep leaves the test set undecoded (test_after_training=false), its factorial decodes it
NOT_TUNED_UNDER = frozenset({"test_after_training"})
ABSENT = "(absent)"


def tuning_run(run_dir: Path) -> dict:
    """What a tuning run trained with, as its folder recorded it: its config (the fingerprint's: every
    setting that changes a result; the seed left out), its config groups, its code and the hash of each
    split's text it read (absent where the run recorded none)."""
    from nmt.training.run_folder import RunFolderError
    from nmt.training.run_identity import result_config, saved_fingerprint

    try:
        saved, _ = saved_fingerprint(run_dir, force=True)
    except RunFolderError:
        saved = None
    # the recorded settings as the identity reads them now: a key that stopped counting since the run was
    # recorded (data=files' paths) is left out, as on the side it is compared with
    config = {k: v for k, v in result_config((saved or {}).get("config") or {}).items() if k != "seed"}
    code = (saved or {}).get("code") or {}
    choices = {}
    hydra = run_dir / ".hydra" / "hydra.yaml"
    if hydra.is_file():
        found = OmegaConf.select(OmegaConf.load(hydra), "hydra.runtime.choices", default=None) or {}
        choices = {str(g): str(v) for g, v in found.items() if not str(g).startswith("hydra")}
    found = {"run": run_dir.name, "config": config, "choices": choices, "code": code}
    text = ((saved or {}).get("data") or {}).get("text")
    if text:
        found["text"] = text
    return found


def write_tuned_file(path: str | Path, settings: dict, notes: list[str], under: dict) -> None:
    """The config ``+tuned=<name>`` loads: the settings, with the notes (command, candidates) and what each
    level was tuned under as comments, which a sweep that loads it checks and its report quotes."""
    from nmt.utils.io import atomic_write_text

    body = OmegaConf.to_yaml(OmegaConf.create({"level_settings": settings}))
    head = "".join(f"# {line}\n" for line in notes if line.strip())
    context = f"# {UNDER}{json.dumps(under, sort_keys=True)}\n" if under else ""
    atomic_write_text(Path(path), f"# @package _global_\n{head}{body}{context}")


def replaced_settings(path: Path, settings: dict) -> str:
    """What writing ``settings`` over the file at ``path`` would change, said in one phrase: the level settings
    of a tuned file that differ (old -> new), or that the file is not a tuned file; '' where there is no file
    or it holds these settings already."""
    if not path.is_file():
        return ""
    import yaml

    try:
        before = plain_settings(OmegaConf.load(path).get("level_settings"))
        changes = []
        settings = plain_settings(settings)
        for key in sorted({*before, *settings}):
            old, new = before.get(key) or {}, settings.get(key) or {}
            for level in sorted({*map(str, old), *map(str, new)}):
                was, now = old.get(level), new.get(level)
                if was != now:
                    changes.append(f"{key}={level}: {' '.join(was or ['(none)'])} -> {' '.join(now or ['(none)'])}")
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):  # not YAML, or not of a tuned file's shape
        before = None
    if not before:  # empty, no level_settings, or unreadable
        return "it is not a tuned file (no level_settings that tune wrote)"
    return "it holds another choice (" + "; ".join(changes) + ")" if changes else ""


def tuned_file(config: DictConfig) -> dict | None:
    """The tuned file a sweep's level settings came from (``+tuned=<name>``), read: None without one."""
    path = tuned_path(config)
    return read_tuned_file(path) if path is not None else None


def read_tuned_file(path: Path) -> dict:
    """A tuned file's name, the notes ``tune`` wrote above its settings (its command, the candidates' table
    and its notes on them), and what each level was tuned under (absent from a file written by hand)."""
    notes = [line[2:].rstrip() for line in path.read_text().splitlines() if line.startswith("# ")]
    tuned = {
        "name": path.stem,
        "path": shown_path(path),
        "notes": [n for n in notes if not n.startswith(("@package", UNDER, BY_HAND))],
    }
    tuned["global"] = any(line.split() == ["@package", "_global_"] for line in notes)
    for line in notes:
        for prefix, key in ((UNDER, "under"), (BY_HAND, "by_hand")):
            if line.startswith(prefix):
                try:
                    tuned[key] = json.loads(line.removeprefix(prefix))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: its '# {prefix}' line is not JSON ({err}); write it again") from None
    if not isinstance(tuned.get("by_hand", {}), dict):
        raise ValueError(f"{path}: its '# {BY_HAND}' line is not a JSON object of settings ({{\"key\": value}})")
    if "by_hand" in tuned:  # beside the settings: the tuning's seeds and the groups' options it held
        tuned["by_hand_seeds"] = [str(seed) for seed in tuned["by_hand"].pop("seeds", None) or []]
        tuned["by_hand_choices"] = {str(k): str(v) for k, v in (tuned["by_hand"].pop("choices", None) or {}).items()}
    return tuned


def tuning_records(tuned: dict, settings: dict) -> dict:
    """What each level of the file was tuned under, {level_key: {level: run}} as ``tune`` records it; for a
    file written by hand, the settings, choices and seeds it names, the same for every level."""
    if "under" in tuned:
        return tuned["under"]
    if "by_hand" not in tuned:
        return {}
    run = {
        "run": "named by hand",
        "config": tuned["by_hand"],
        "choices": tuned.get("by_hand_choices") or {},
        "seeds": tuned.get("by_hand_seeds") or [],
    }
    return {key: {str(level): run for level in by} for key, by in settings.items()}


def checked_tuned_file(config: DictConfig, factors: list[str]) -> dict | None:
    """The sweep's tuned file (``+tuned=<name>``), read and compared with this sweep before any run starts
    (``plan=true`` too), each finding said: the levels whose runs here differ from their tuning, those not
    checked, and the seeds the tuning also ran. None without a file; a file none of whose levels this sweep
    runs is refused (its settings would apply to no run)."""
    tuned = tuned_file(config)
    if not tuned:
        return None
    if not tuned.get("global"):  # Hydra then nests the file's keys under `tuned`: no level would get them
        print(
            f"error: +tuned={tuned['name']}: {tuned['path']} does not begin with '# @package "
            "_global_' (as tune writes it), so Hydra reads its level_settings as tuned.level_settings, which no run "
            "reads; add that line at its top",
            file=sys.stderr,
        )
        raise SystemExit(2)
    levels = sweep_levels(config)
    settings = plain_settings(config.get("level_settings"))
    if not any(runs_level(levels, key, lv) for key, by in settings.items() for lv, o in by.items() if o):
        named = ", ".join(f"{key}={lv}" for key, by in settings.items() for lv in by) or "none"
        print(
            f"error: +tuned={tuned['name']}: this sweep runs none of its levels ({named}), so its settings apply "
            "to no run; run those levels, or leave +tuned out",
            file=sys.stderr,
        )
        raise SystemExit(2)
    # a level of a tuned key that this sweep runs with no settings in the file (optim=adamw beside a tuned adam
    # and noam) runs at its defaults: compared untuned, said before any run as the report says it after
    for key, by in settings.items():
        untuned = [lv for lv in levels.get(key, []) if not any(same_level(lv, t, key) and o for t, o in by.items())]
        if untuned:
            print(
                f"[sweep] warning: {', '.join(f'{key}={lv}' for lv in untuned)} "
                f"{'has' if len(untuned) == 1 else 'have'} no settings in +tuned={tuned['name']} (tuned: "
                f"{', '.join(f'{key}={lv}' for lv, o in by.items() if o)}): "
                f"{'it runs' if len(untuned) == 1 else 'they run'} at the defaults and the command line's "
                "settings, compared untuned with the tuned levels; tune it too (python sweep.py tune), or leave it out",
                flush=True,
            )
    texts: dict[str, dict | str] = {}
    tuned["differs"], tuned["unchecked"] = tuned_differences(tuned, config, factors, texts)
    tuned["text_not_compared"] = sorted({why for why in texts.values() if isinstance(why, str)})
    tuned["tuned_at"] = tuned_at(tuned, settings, levels, factors)
    for level, held in tuned["tuned_at"].items():
        print(
            f"[sweep] note: {level}'s settings (+tuned={tuned['name']}) were chosen at {held} and serve every cell: "
            "whether other levels of those factors want other settings was not tuned",
            flush=True,
        )
    tuned["compared"] = [  # the levels run here whose settings were compared, alike or not
        f"{key}={lv}"
        for key, by in settings.items()
        for lv in by
        if runs_level(levels, key, lv) and f"{key}={lv}" not in tuned["unchecked"]
    ]
    for level, why in tuned["unchecked"].items():
        print(f"[sweep] warning: {level}'s settings (+tuned={tuned['name']}) are not checked: {why}", flush=True)
    alike: dict[str, list[str]] = {}  # levels with the same differences, said once
    for level, said in tuned["differs"].items():
        alike.setdefault("; ".join(said), []).append(level)
    for said, names in alike.items():
        print(
            f"[sweep] warning: {' and '.join(names)}'s settings (+tuned={tuned['name']}) were chosen under other "
            f"settings than this sweep's: {said}",
            flush=True,
        )
    tuned["seeds_reused"] = reused_seeds(tuned, config)
    if tuned["seeds_reused"]:
        print(
            f"[sweep] note: {seeds_reused_text(tuned['seeds_reused'])} also ran in the tuning: a run at a tuned "
            "setting with one may repeat the tuning run that won on validation (its validation score leans high); "
            "give the tuning seeds of its own to avoid it",
            flush=True,
        )
    return tuned


def tuned_differences(
    tuned: dict, config: DictConfig, factors: list[str], texts: dict | None = None
) -> tuple[dict, dict]:
    """For each level this sweep runs with the file's settings, how its run here differs from the tuning run
    that chose them: the run composed with the level, its settings and the tuning's values of this sweep's
    other factors (where the sweep has them), compared setting by setting, the seed aside, and the code.
    ({"optim=noam": ["key: X in tuning, Y here", ...]}, {"optim=adamw": "why it was not compared"}).
    ``texts``: filled with the hash of each corpus's text read here, or why it could not be read."""
    levels = sweep_levels(config)
    settings = plain_settings(config.get("level_settings"))
    differs, unchecked = {}, {}
    texts = {} if texts is None else texts  # each corpus's text hashes here, by data settings, cache and seed
    for level_key, by_level in settings.items():
        for level, overrides in by_level.items():
            if not runs_level(levels, level_key, level):
                continue  # a level this sweep does not run
            name = f"{level_key}={level}"
            run = (tuned.get("under") or {}).get(level_key, {}).get(level)
            if "under" not in tuned and tuned.get("by_hand"):
                compare = functools.partial(_compared_by_hand, tuned["by_hand"], config, level_key, level)
                _compare_into(compare, name, differs, unchecked)
            elif "under" not in tuned:
                unchecked[name] = "the file does not record its tuning (written by hand, or before tune recorded it)"
            elif run is None:
                unchecked[name] = "its settings are not a choice of the tuning the file records (added by hand?)"
            elif not run.get("config"):
                unchecked[name] = f"its tuning run ({run.get('run', '?')}) recorded no settings"
            else:
                compare = functools.partial(_compared, run, config, levels, factors, level_key, level, overrides, texts)
                _compare_into(compare, name, differs, unchecked)
    return differs, unchecked


def _compare_into(compare, name: str, differs: dict, unchecked: dict) -> None:
    """``compare()``'s differences of level ``name`` into ``differs``, or why it could not run into
    ``unchecked``: said, and the sweep decides nothing on it."""
    try:
        said = compare()
    except Exception as err:  # noqa: BLE001 - said, and the sweep decides nothing on it
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        unchecked[name] = f"its run here cannot be composed to compare ({first})"
        return
    if said:
        differs[name] = said


def _compared(
    run: dict, config: DictConfig, levels: dict, factors, level_key: str, level: str, overrides, texts: dict
) -> list:
    """How this sweep's run of ``level`` at the tuning's values of its other factors differs from the tuning
    run that chose the level's settings: ``key: X in tuning, Y here`` lines (``texts``: the corpus text
    hashes read so far, shared by the levels)."""
    from nmt.training.run_identity import code_version, differences

    values, said = {**planned_values(config)[0], level_key: level}, []
    for factor in factors:  # the cell of the tuning's other settings, where this sweep runs it
        if factor in (level_key, "seed"):
            continue
        held = _tuning_value(run, factor)
        here = next((level for level in levels[factor] if same_level(level, held, factor)), None)  # 0 and 0.0 alike
        if here is not None:
            values[factor] = here  # as this sweep writes it
        else:  # tuned at a level this sweep does not run (or at no option of the group)
            said.append(f"{factor}: {held} in tuning, not a level here ({', '.join(levels[factor])})")
    overrides_here = run_overrides(config, values)
    here = expected_fingerprint(overrides_here)["config"]
    here = json.loads(json.dumps(here, default=str))  # as the file holds the tuning's: JSON values
    own = {str(o).lstrip("+~").partition("=")[0] for o in overrides}
    differing = [
        key
        for key in sorted(set(run["config"]) | set(here))
        if key != "seed" and key not in NOT_TUNED_UNDER and run["config"].get(key, ABSENT) != here.get(key, ABSENT)
    ]
    for key in differing:
        edited = " (a level setting: not the value its tuning chose)" if key in own else ""
        said.append(f"{key}: {_shown(run['config'], key)} in tuning, {_shown(here, key)} here{edited}")
    # the text, where the corpus settings are the tuning's: otherwise it differs by them, as said above
    if run.get("text") and not any(key == "data" or key.startswith("data.") for key in differing):
        said += _text_differences(run["text"], overrides_here, texts)
    before = run.get("code") or {}
    if before.get("hash"):  # the run folders' own wording: commits, uncommitted changes
        said += [
            line.replace("changed (", "changed since the tuning (")
            for line in differences({"code": before}, {"code": code_version()})
        ]
    return said


def _text_differences(recorded: dict, overrides: list[str], texts: dict) -> list[str]:
    """The splits whose text, as this sweep's run with ``overrides`` would read it, is not the text the tuning
    run read (``recorded``: its fingerprint's hashes): one line, or none. Text that cannot be read here (a
    corpus not yet downloaded, a folder gone) is said on its own line and not called a difference. A corpus's
    text depends on its settings (``data.*``, its ``split_seed`` included), never on the run's seed, so the
    run's own seed reads the tuning run's text."""
    from nmt.tasks import build_task

    cfg = compose_train(overrides)
    data = OmegaConf.create(OmegaConf.to_container(cfg.data, resolve=True))
    if "download" in data:  # a check before the sweep reads what is here; the runs download what they need
        data.download = False
    key = json.dumps([OmegaConf.to_container(data), str(cfg.cache_dir)], sort_keys=True, default=str)
    if key not in texts:  # the levels of a factorial mostly read one corpus: read once, said once
        try:
            texts[key] = build_task(cfg.task).build_datamodule(data, cfg.cache_dir, cfg.seed).text_hashes()
        except Exception as err:  # noqa: BLE001 - said; the runs themselves fail on it, each with its message
            texts[key] = f"it cannot be read when the sweep starts ({type(err).__name__}: {_one_line(err)})"
            print(f"[sweep] note: the corpus text of the tuned levels' runs is not compared with their tuning's: "
                  f"{texts[key]}", flush=True)  # fmt: skip
    now = texts[key]
    if isinstance(now, str):
        return []
    changed = [split for split in ("train", "val", "test") if split in recorded and recorded[split] != now.get(split)]
    if not changed:
        return []
    return [
        f"the corpus text: the {', '.join(changed)} split{'s' if len(changed) > 1 else ''} read here "
        f"differ{'' if len(changed) > 1 else 's'} from the tuning run's (another copy of the corpus, or "
        "files edited since the tuning)"
    ]


def _one_line(err: Exception) -> str:
    """An error's whole message on one line (a missing corpus lists each place tried, then the fix)."""
    if isinstance(err, OSError) and err.filename:
        return f"{err.filename}: {err.strerror}"
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__


def tuned_at(tuned: dict, settings: dict, levels: dict, factors: list[str]) -> dict[str, str]:
    """For each tuned level this sweep runs, the levels of the sweep's other factors its tuning run held
    (``pos=absolute, norm=layer``): its settings serve every cell, tuned in one ({"optim=noam": "..."})."""
    found = {}
    for level_key, by_level in settings.items():
        others = [f for f in factors if f not in (level_key, "seed") and len(levels.get(f, [])) > 1]
        for level in by_level:
            run = (tuning_records(tuned, settings).get(level_key) or {}).get(str(level))
            if not (others and runs_level(levels, level_key, level) and run and run.get("config")):
                continue
            held = [f"{f}={value}" for f in others if (value := _tuning_value(run, f)) != ABSENT]
            if held:
                found[f"{level_key}={level}"] = ", ".join(held)
    return found


def _tuning_value(run: dict, factor: str) -> str:
    """The tuning run's value of a factor of this sweep, as Hydra writes a sweep's values (``True``, ``0.5``):
    its group's option, its setting, or (absent)."""
    if factor in run.get("choices", {}):
        return run["choices"][factor]
    if factor not in run["config"]:
        return ABSENT
    value = run["config"][factor]
    return expand([f"{factor}={value if isinstance(value, str) else json.dumps(value)}"])[factor][0]


def _compared_by_hand(named: dict, config: DictConfig, level_key: str, level: str) -> list[str]:
    """How this sweep's run of ``level`` differs from the settings a hand-written tuned file names (``named``:
    {flat key: value}): ``key: X in tuning, Y here`` lines, those keys alone."""
    here = expected_fingerprint(run_overrides(config, {**planned_values(config)[0], level_key: level}))["config"]
    here = json.loads(json.dumps(here, default=str))
    return [
        f"{key}: {_shown(named, key)} in tuning, {_shown(here, key)} here"
        for key in sorted(named)
        if named[key] != here.get(key, ABSENT)
    ]


def _shown(config: dict, key: str) -> str:
    return json.dumps(config[key]) if key in config and not isinstance(config[key], str) else config.get(key, ABSENT)


def reused_seeds(tuned: dict, config: DictConfig) -> dict[str, list[str]]:
    """By level (``optim=noam``), this sweep's seeds that the level's tuning also ran: a run of that level at
    its tuned setting with one of them may repeat the tuning run whose validation score chose the setting. A
    level tuned under other settings is no exception: a difference that changes nothing for it (early stopping's
    after_warmup for a level without warm-up) leaves the run a repeat, and one that does still shares the
    seed's start. Levels sharing none are left out."""
    levels = sweep_levels(config)
    here = set(levels.get("seed") or [str(OmegaConf.select(config, "seed", default=""))])
    reused = {}
    for level_key, by_level in tuning_records(tuned, plain_settings(config.get("level_settings"))).items():
        for level, run in by_level.items():
            name = f"{level_key}={level}"
            if not runs_level(levels, level_key, level):
                continue
            shared = sorted({str(seed) for seed in run.get("seeds", [])} & here, key=lambda s: (len(s), s))
            if shared:
                reused[name] = shared
    return reused


def seeds_reused_text(reused: dict | list) -> str:
    """``seed 1 (optim=adam), seeds 1, 2 (optim=noam)``: the seeds a factorial shares with the tuning of each
    level. A list (a plan.json written before the seeds were kept by level): the seeds alone."""
    if isinstance(reused, list):
        return f"seed{'s' if len(reused) > 1 else ''} {', '.join(reused)}"
    by_seeds: dict[str, list[str]] = {}  # levels sharing the same seeds, said once
    for level, seeds in reused.items():
        by_seeds.setdefault(", ".join(seeds), []).append(level)
    return "; ".join(
        f"seed{'s' if ',' in seeds else ''} {seeds} ({' and '.join(names)})" for seeds, names in by_seeds.items()
    )
