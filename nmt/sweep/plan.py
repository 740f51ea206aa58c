"""A sweep before it runs: its runs and their folders, the overrides and fingerprint each run will get, the
plan that ``plan=true`` prints, and the first problem of its factors or baseline (refused before anything
runs). :mod:`nmt.sweep.runner` launches the runs."""

import re
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.sweep.gpus import mps_folder, pool_problem
from nmt.sweep.levels import (
    SWEEP_KEYS,
    hydra_quoted,
    level_overrides,
    override_pairs,
    plain_level,
    plain_settings,
    same_level,
    sweep_levels,
)
from nmt.sweep.mps import CONTROL
from nmt.sweep.records import RESULT, read_record
from nmt.sweep.summary import budget_of, budget_text, planned, run_cost_s
from nmt.utils.configs import CONF, options_with_key


def command_prefixes(overrides) -> dict[str, str]:
    """The Hydra prefix (+, ++, ~) each command-line key came with."""
    found = {}
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0]
        found[key] = override[: len(override) - len(override.lstrip("+~"))]
    return found


def as_override(key: str, value: str, prefix: str = "") -> str:
    """The override string of a key and value, with its prefix given back (``~key`` deletes it)."""
    return f"~{key}" if prefix == "~" and not value else f"{prefix}{key}={value}"


def compose_train(overrides: list[str], hydra: bool = False):
    """The train config with these overrides (inside a running Hydra app or outside one); ``hydra``: with
    Hydra's own node (its record of the group choices)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [*overrides, *searchpath_override()]
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="train", overrides=overrides, return_hydra_config=hydra)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=hydra)


# the sweep's hydra.searchpath, as its callback found it (Hydra's record of the job, HydraConfig, is set only in
# a job): the config folders its runs are composed from
SEARCHPATH: list[str] = []


def searchpath_override() -> list[str]:
    """The sweep's ``hydra.searchpath`` as an override of its runs (an experiment of the user's own config
    folder, which the sweep found there: each run composes it from there too), [] for none."""
    from hydra.core.hydra_config import HydraConfig

    paths = list(HydraConfig.get().searchpath or []) if HydraConfig.initialized() else SEARCHPATH
    return [f"hydra.searchpath=[{','.join(hydra_quoted(p) for p in paths)}]"] if paths else []


def run_config_problem(config: DictConfig) -> str | None:
    """One line for the first cell whose runs train.py would refuse (its config checks, or a group its model
    does not use), before any run is started: every run of that cell would fail the same way. A problem that
    every cell has (a setting of the command line, not of a level) is said of every run, not of the first
    cell alone."""
    from nmt.training.config import ConfigError, check_config
    from nmt.training.config_unread import unused_groups

    levels = sweep_levels(config)
    swept = {k for k, v in levels.items() if len(v) > 1}
    # the cells below are checked at their first seed: every other seed is checked here, as train.py reads it
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for seed in levels.get("seed", []):
        value = OverridesParser.create().parse_override(f"seed={seed}").value()
        if isinstance(value, bool) or not isinstance(value, int):
            given = ",".join(levels["seed"])
            listed = re.fullmatch(r"\[([\d\s,]+)\]", given)  # a list for several seeds: a sweep's are a comma list
            how = f"; for several seeds, seed={''.join(listed.group(1).split())}" if listed else ""
            return f"seed={seed}: a seed is a whole number, as train.py reads it ({given} given){how}"
    seen, refused = set(), []  # refused: (cell, its problems)
    for values in planned_values(config):
        cell = tuple(sorted((k, v) for k, v in values.items() if k != "seed"))
        if cell in seen:
            continue
        seen.add(cell)
        overrides = run_overrides(config, values)
        try:
            composed = compose_train(overrides, hydra=True)
        except Exception as err:  # noqa: BLE001  input_problem passed its factors: a level setting, or a constant
            where = ",".join(f"{k}={v}" for k, v in cell if k in swept) or "every run"
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            return (
                f"the runs of {where} cannot be composed: {first}{_closest_key(first, overrides)} (a key of "
                "level_settings or of the command line?)"
            )
        choices = dict(composed.hydra.runtime.choices)
        cfg = OmegaConf.masked_copy(composed, [k for k in composed if k != "hydra"])
        problems = [p.strip() for p in unused_groups(cfg, choices, overrides)]
        try:
            check_config(cfg, choices)
        except ConfigError as err:
            problems += [line.strip() for line in str(err).splitlines()[1:]]
        if problems:
            refused.append((cell, problems))
    if not refused:
        return None
    cell, problems = refused[0]
    shared = [p for p in problems if all(p in others for _, others in refused)]
    if len(refused) == len(seen) and shared:
        return f"every run would be refused: {'; '.join(_grid_named(config, shared))}"
    where = ",".join(f"{k}={v}" for k, v in cell if k in swept) or "every run"
    return f"the runs of {where} would be refused: {'; '.join(_grid_named(config, problems))}"


def _grid_named(config: DictConfig, problems: list[str]) -> list[str]:
    """The problems with a key the grid set, not the command line (``pos=absolute`` of the default
    grid=transformer under model=rnn): said so, since "remove it" names nothing the user typed."""
    typed = {o.lstrip("+~").partition("=")[0] for o in config.hydra.overrides.task}
    from_grid = set(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}) - typed
    grid = OmegaConf.select(config, "hydra.runtime.choices.grid", default=None)
    return [
        f"{problem} (it is a factor of grid={grid}: give grid=none, or a grid for this model)"
        if problem.split(":")[0].split("=")[0].strip() in from_grid  # pos=absolute: ..., not optim.optimizer.eps
        else problem
        for problem in problems
    ]


def swept_keys(sweep_dir: Path) -> set[str]:
    """Keys with several values in this sweep: the grid's parameters and comma lists on the command line
    (read from the multirun.yaml Hydra writes before launching)."""
    search = planned(sweep_dir).get("search")
    if search:  # a search's keys (its sweeper writes no multirun.yaml): each trial's folder is named by them
        return set(search["space"]) | {"seed"}
    saved = OmegaConf.load(sweep_dir / "multirun.yaml")
    return {k for k, values in sweep_levels(saved).items() if len(values) > 1} | {"seed"}


def run_name(values: dict[str, str], swept: set[str]) -> str:
    """A run's folder in the sweep: its values of the swept keys, sorted by key, each a name of one folder
    (a level that is a path, data.train=corpus/a.tsv, made folders within folders, which no reader of the
    sweep looks into: its runs were neither reported nor counted as done or failed); a quoted level is named
    without its quotes."""
    return ",".join(f"{k}={_one_folder(plain_level(v))}" for k, v in sorted(values.items()) if k in swept)


def _one_folder(value: str) -> str:
    """``/`` (and ``%``, so that names stay distinct) written as in a URL: corpus%2Fa.tsv."""
    return value.replace("%", "%25").replace("/", "%2F")


def planned_values(config: DictConfig) -> list[dict[str, str]]:
    """Every run of the sweep as {key: value}, in the sweeper's order (the first key varies slowest)."""
    runs = [{}]
    for key, values in sweep_levels(config).items():
        runs = [{**run, key: value} for run in runs for value in values]
    return runs


def run_overrides(config: DictConfig, values: dict[str, str]) -> list[str]:
    """The train.py overrides of the run with these values, as run_cell passes them (prefixes kept; the
    GPU pool's device count added)."""
    prefixes = command_prefixes(config.hydra.overrides.task)
    overrides = [as_override(k, v, prefixes.get(k, "")) for k, v in values.items()]
    overrides += level_overrides(config.get("level_settings"), values)
    if config.get("gpu_pool"):
        overrides.append(f"trainer.devices={int(config.gpus_per_run)}")
    return overrides


def expected_fingerprint(overrides: list[str]) -> dict:
    """The fingerprint train.py will record for the run with these overrides (composed here as it will be)."""
    from nmt.training.config_device import resolve_precision
    from nmt.training.run_identity import fingerprint

    cfg = compose_train(overrides)
    keep = [k for k in cfg if k not in (*SWEEP_KEYS, "name")]
    job = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keep), resolve=True)
    if str(job["trainer"]["precision"]) == "auto":  # as train() resolves it; other values stay as composed
        job["trainer"]["precision"] = resolve_precision("auto", job["trainer"]["accelerator"])
    return fingerprint(job)


def _text_differences(run: Path, overrides: list[str], read: dict) -> list[str]:
    """The splits whose text changed since the folder's run read its data (an edited corpus file), as
    train.py compares a finished run's; ``read``: the text hashes already read, by data settings (a sweep's
    runs mostly share one corpus, read once: its text depends on ``data.*``, ``split_seed`` included, never
    on the run's seed, as tests/test_corpora.py checks for each corpus module). Nothing where the run recorded no
    text or the data cannot be read (its results stand, as train.py keeps them)."""
    import json

    from nmt.tasks import build_task
    from nmt.training.run_identity import changed_splits, current_text, moved_without_text, saved_text

    saved = saved_text(run)
    cfg = compose_train(overrides)
    if not saved:  # recorded before text hashes were: its files' paths, which it recorded, decide
        moved = moved_without_text(run, OmegaConf.to_container(cfg, resolve=True))
        return (
            [f"data: its files were given elsewhere ({'; '.join(moved)}), recorded before text was compared"]
            if moved
            else []
        )
    key = json.dumps([OmegaConf.to_container(cfg.data, resolve=True), str(cfg.cache_dir)], sort_keys=True)
    if key not in read:
        try:
            read[key] = current_text(cfg, build_task(cfg.task))
        except Exception as err:  # noqa: BLE001 - gone or refused: train.py says so where it matters
            print(f"[sweep] cannot read the data of {run.name} to compare its text: {type(err).__name__}")
            read[key] = None
    if read[key] is None:
        return []
    changed = changed_splits(saved, read[key])
    return [f"data: the text of its {', '.join(changed)} split(s) changed since it was read"] if changed else []


def changed_runs(sweep_dir: Path, config: DictConfig, runs: dict[str, dict] | None = None) -> dict[str, list[str]]:
    """Run folders of this sweep holding a run made under other settings, code or text: name -> differences.
    ``runs``: each run folder's name with its values (a search's trials); by default the grid's planned runs."""
    from nmt.training.run_folder import RunFolderError, holds_work
    from nmt.training.run_identity import differences, saved_fingerprint

    if runs is None:
        swept = {k for k, v in sweep_levels(config).items() if len(v) > 1} | {"seed"}
        runs = {run_name(values, swept): values for values in planned_values(config)}
    changed, read = {}, {}
    for name, values in runs.items():
        run = sweep_dir / name
        # a run that failed before its first checkpoint binds nothing: the corrected sweep runs it afresh
        if not (holds_work(run) or (run / RESULT).is_file()):
            continue
        try:  # without a readable fingerprint.json, the run's config.yaml says what it was made with
            saved, _ = saved_fingerprint(run, holds=True)
        except RunFolderError:
            changed[run.name] = [
                "its settings cannot be checked (neither fingerprint.json nor config.yaml is readable)"
            ]
            continue
        try:
            expected = expected_fingerprint(run_overrides(config, values))
        except Exception as err:  # an override this check cannot compose (e.g. +new_key=...)
            print(f"[sweep] cannot check the settings of {run.name}: {type(err).__name__}")
            continue
        found = differences(saved, expected)
        if not found:  # the same settings: the same text too (an edited corpus file is another corpus)
            found = _text_differences(run, run_overrides(config, values), read)
        if found:
            changed[run.name] = found
    return changed


def print_plan(sweep_dir: Path, config: DictConfig) -> None:
    """What the sweep will do, without training: factors and where their levels come from, constants,
    runs done and to run, and the expected cost from the runs already finished."""
    grid = {k: str(v).split(",") for k, v in (config.hydra.sweeper.get("params") or {}).items()}
    given = dict((k, v.split(",")) for k, v in override_pairs(config.hydra.overrides.task))
    levels = sweep_levels(config)
    swept = {k for k, v in levels.items() if len(v) > 1} | {"seed"}
    print(f"Sweep {sweep_dir.name} in {sweep_dir}")  # hydra.sweep.dir may name the folder, not sweep_name
    _print_design(config, levels, given, grid)
    runs = planned_values(config)
    for line in recipe_lines(config, runs):
        print(f"  {line}")
    cells = len(runs) // max(len(levels.get("seed", ["1"])), 1)
    print(f"  {cells} cells x {len(levels.get('seed', ['1']))} seeds = {len(runs)} runs")
    done, to_run, changed, moving = _print_runs_done(sweep_dir, config, runs, swept)
    _print_cost_and_stops(sweep_dir, config, done, to_run, changed, moving)


def _print_design(config: DictConfig, levels: dict, given: dict, grid: dict) -> None:
    """The plan's factors and seeds with where their levels come from, factors held, each level's own
    settings, and the constants."""
    from nmt.sweep.tuned_source import experiment_factors

    # a factor the chosen experiment's file sets (under grid=none: inputs.py refuses it under another grid)
    own = experiment_factors(config)
    experiment = OmegaConf.select(config, "hydra.runtime.choices.experiment", default=None)

    def factor_origin(key: str) -> str:
        return f"experiment={experiment}" if key in own else "grid"

    for key, values in levels.items():
        if len(values) > 1:
            source = (
                "command line" + (" (replaces the grid's)" if key in grid else "")
                if key in given
                else factor_origin(key)
            )
            kind = "seeds (not a factor: each cell's replicates)" if key == "seed" else f"factor {key}"
            print(f"  {kind}: {', '.join(values)}   [{source}]")
    for key, values in given.items():
        if len(values) == 1 and len(grid.get(key, [])) > 1:
            print(f"  {key} held at {values[0]} by the command line (the grid's factor: {', '.join(grid[key])})")
    # where the level settings come from: a tuned file (+tuned=<name>) or level_settings given
    tuned = OmegaConf.select(config, "hydra.runtime.choices.tuned", default=None)
    origin = f"+tuned={tuned} ({_tuned_shown(config)})" if tuned else "level_settings"
    for key, by_level in plain_settings(config.get("level_settings")).items():
        for level, overrides in by_level.items():
            # a level this sweep runs, with settings of its own
            if any(same_level(level, ran, key) for ran in levels.get(key, [])) and overrides:
                print(f"  with {key}={level}: {' '.join(map(str, overrides))}   [{origin}]")
    constants = [f"{k}={v[0]}" for k, v in given.items() if len(v) == 1]
    print(f"  constants from the command line: {' '.join(constants) or 'none'}")
    grid_constants = [f"{k}={v[0]}" for k, v in grid.items() if len(v) == 1 and k not in given]
    if grid_constants:
        print(f"  constants from the grid: {' '.join(grid_constants)}")


def _print_runs_done(sweep_dir: Path, config: DictConfig, runs: list, swept: set) -> tuple[list, list, dict, bool]:
    """The runs done and to run (those made under other settings counted apart, and what a run to run will do
    with its folder); returns them, the runs made under other settings, and whether those are set aside."""
    done, to_run = [], []
    for values in runs:
        folder = sweep_dir / run_name(values, swept)
        (done if _readable(folder / RESULT) else to_run).append(folder)  # an unreadable record: recorded again
    changed = changed_runs(sweep_dir, config)
    moving = config.get("on_changed", "stop") == "move"
    if moving:  # set aside, then trained again
        to_run += [folder for folder in done if folder.name in changed]
        done = [folder for folder in done if folder.name not in changed]
        print(f"  done: {len(done)}; to run: {len(to_run)} ({len(changed)} made under other settings, set aside first)")
    else:  # a run stopped part-way under other settings is one to run, not one done
        from nmt.training.run_folder import finished_results, resumable, trained_results

        finished_changed = sum(folder.name in changed for folder in done)
        partly = len(changed) - finished_changed
        states = dict.fromkeys(  # what a run to run will do with its folder, as the sweep's runner says
            ("trained already, recorded now", "trained already, their final scores made now",
             "resumed from their last checkpoint"), 0
        )  # fmt: skip
        for folder in to_run:
            if folder.name in changed:
                continue
            if finished_results(folder):
                states["trained already, recorded now"] += 1
            elif trained_results(folder):
                states["trained already, their final scores made now"] += 1
            elif resumable(folder):
                states["resumed from their last checkpoint"] += 1
        print(
            f"  done: {len(done)} ({finished_changed} of them under other settings); to run: {len(to_run)}"
            + (f" ({partly} of them partly trained under other settings)" if partly else "")
            + "".join(f" ({n} of them {state})" for state, n in states.items() if n)
        )
    return done, to_run, changed, moving


def _print_cost_and_stops(
    sweep_dir: Path, config: DictConfig, done: list, to_run: list, changed: dict, moving: bool
) -> None:
    """The expected cost, from the runs finished, and what would stop the sweep before any run."""
    walls = [run_cost_s(read_record(folder / RESULT)) for folder in done]
    for folder in to_run:
        if (folder / RESULT).is_file() and not _readable(folder / RESULT):  # recorded again from its folder
            print(f"  {folder / RESULT} cannot be read: the sweep would record it again from the run's folder")
    source = f"the mean of the {len(walls)} finished runs"
    if not walls and to_run:  # e.g. new seeds of a sweep whose first seeds finished in this folder
        walls, source = _other_finished_costs(sweep_dir, {folder.name for folder in done + to_run})
    if not walls and to_run and moving:  # every finished run is to be set aside: its cost is a guide all the same
        walls = [run_cost_s(read_record(f / RESULT)) for f in to_run if f.name in changed and _readable(f / RESULT)]
        source = f"the mean of the {len(walls)} finished run(s) made under other settings, a rough guide"
    if changed and not moving:
        print("  expected cost: none: the sweep would stop first (below)")
    elif walls and to_run:
        print(f"  expected cost: about {run_time(walls, len(to_run))} of run time ({source})")
    else:
        print("  expected cost: " + ("nothing left to run" if not to_run else "unknown until a run has finished"))
    for name, found in changed.items():
        print(f"  under other settings: {name}: {'; '.join(found[:4])}")
    if changed and not moving:
        print(
            f"  the sweep would stop before any run, on the {len(changed)} run(s) made under other settings or "
            f"code: give it its own {own_folder(config)}, or on_changed=move to set them aside and run them again"
        )
    pool = pool_problem(config) if config.get("gpu_pool") else None
    if pool:
        print(f"  here the sweep would stop before any run: {pool}")
    if config.get("gpu_mps"):
        found = "found" if shutil.which(CONTROL) else "NOT on PATH here: the sweep would stop before any run"
        print(f"  the runs of a GPU side by side under CUDA's MPS, daemon in {mps_folder()} ({CONTROL}: {found})")


def run_time(walls: list[float], runs: int) -> str:
    """About how long ``runs`` runs take at the mean of ``walls`` (each finished run's seconds)."""
    hours = sum(walls) / len(walls) * runs / 3600
    return f"{hours:.1f} h" if hours >= 0.1 else f"{hours * 60:.1f} min"


def recipe_lines(config: DictConfig, runs: list[dict[str, str]]) -> list[str]:
    """The recipe each run trains by and its budget, once per distinct one (the cells of model=rnn,transformer
    may each have their own): the plan said nothing of how long each run trains, nor of the recipe applied."""
    from nmt.training.run_description import recipe_applied

    swept = {k for k, v in sweep_levels(config).items() if len(v) > 1}
    said: dict[str, list[str]] = {}
    seen = set()
    for values in runs:
        # the group choices, and any other factor but the seed (trainer.max_epochs=6,20 is two budgets)
        groups = tuple(sorted((k, v) for k, v in values.items() if (CONF / k).is_dir() or (k in swept and k != "seed")))
        if groups in seen:
            continue
        seen.add(groups)
        try:
            composed = compose_train(run_overrides(config, values), hydra=True)
        except Exception:  # noqa: BLE001  (a cell that cannot be composed: the checks before the plan say why)
            continue
        recipe = composed.hydra.runtime.choices.get("recipe")
        named = f"recipe {recipe} (conf/recipe/{recipe}.yaml)" if recipe_applied(recipe) else "no recipe"
        cell = ",".join(f"{k}={v}" for k, v in groups if k in swept)
        said.setdefault(f"{named}; {budget_text(budget_of(composed))}", []).append(cell)
    if len(said) == 1:
        return [f"each run: {next(iter(said))}"]
    return [f"runs of {' and '.join(cells)}: {text}" for text, cells in said.items()]


def _other_finished_costs(sweep_dir: Path, planned: set[str]) -> tuple[list[float], str]:
    """The costs of runs finished in the sweep's folder that this sweep does not plan (other seeds or cells
    of an earlier sweep in it), and how the estimate says where they come from."""
    walls = []
    for path in sorted(sweep_dir.glob(f"*/{RESULT}")):
        if path.parent.name in planned:
            continue
        try:
            walls.append(run_cost_s(read_record(path)))
        except ValueError:
            continue  # said where that run is planned; here it only lacks from the estimate
    return walls, f"the mean of {len(walls)} other finished run(s) in this folder: other seeds or cells"


def wandb_group(sweep_name: str, sweep_dir, overrides) -> str:
    """The sweep's W&B group: its ``sweep_name`` where that names it (its folder is sweeps/<sweep_name>, or
    the command gave the name), else its folder's name: two sweeps in folders of their own given by
    ``hydra.sweep.dir`` under the default name would otherwise share one group."""
    named = any(str(o).lstrip("+~").partition("=")[0] == "sweep_name" for o in overrides)
    if named or Path(str(sweep_dir)) == Path("sweeps") / str(sweep_name):
        return str(sweep_name)
    return Path(str(sweep_dir)).name


def own_folder(config: DictConfig) -> str:
    """How to give a sweep a folder of its own: ``sweep_name=...``, or ``hydra.sweep.dir=...`` where the
    command gave the folder itself (sweep_name then names nothing)."""
    by_name = Path(str(config.hydra.sweep.dir)) == Path("sweeps") / str(config.get("sweep_name"))
    return "sweep_name=..." if by_name else "hydra.sweep.dir=..."


def planned_runs(config: DictConfig) -> int:
    runs = 1
    for values in sweep_levels(config).values():
        runs *= len(values)
    return runs


def _readable(record: Path) -> bool:
    """Whether a run's record file is there and reads as one (a damaged one is made again by the sweep)."""
    try:
        read_record(record)
    except ValueError:
        return False
    return True


def _tuned_shown(config: DictConfig) -> str:
    from nmt.sweep.tuned_source import shown_path, tuned_path

    path = tuned_path(config)
    return shown_path(path) if path is not None else "its file"


def key_of_another_option(key: str) -> str:
    """ " (it is a key of model=rnn)" where the key is one of another option of its group (the command line's
    check says it so too); "" otherwise."""
    groups = sorted(str(p.relative_to(CONF)) for p in CONF.rglob("*") if p.is_dir())
    owners = options_with_key(key, CONF, groups)
    group = key.split(".")[0]
    return f" (it is a key of {' or '.join(f'{group}={o}' for o in owners)})" if owners else ""


def _closest_key(error: str, overrides: list[str]) -> str:
    """ " (did you mean <key>?)" for Hydra's "Could not override '<key>'", the nearest key of the run's config
    composed without that override (the command line's typo gets one from train.py's check; a level setting's
    got none); where the key is one of another option of its group (optim.scheduler.factor, noam's, given to
    adam), that option; or ""."""
    import difflib
    import re

    found = re.search(r"Could not override '([^']+)'", error)
    if found is None:
        return ""
    key = found.group(1)
    if owned := key_of_another_option(key):
        return owned
    try:
        base = compose_train([o for o in overrides if o.lstrip("+~").partition("=")[0] != key])
    except Exception:  # noqa: BLE001 - another override fails too: that error is said as it is
        return ""

    def dotted(node, prefix: str = "") -> list[str]:
        if not isinstance(node, dict):
            return [prefix]
        return [k for name, child in node.items() for k in dotted(child, f"{prefix}{name}.")] or [prefix]

    keys = [k.rstrip(".") for k in dotted(OmegaConf.to_container(base, resolve=False))]
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""
