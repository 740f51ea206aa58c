"""A sweep's inputs checked before anything runs: its own settings, its factors and their levels, the keys
each run's config must have, the metric its report ranks by and its baseline. Each check returns one line
naming the first problem, or None."""

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from nmt.sweep.gpus import pool_problem
from nmt.sweep.gpus import setting_problem as mps_setting_problem
from nmt.sweep.levels import is_search, level_settings_problem, same_level, sweep_levels
from nmt.sweep.plan import (
    as_override,
    command_prefixes,
    compose_train,
    key_of_another_option,
    own_folder,
    planned_values,
)
from nmt.sweep.search import searched_override_problem
from nmt.sweep.tuned_source import chosen_file, config_folders, experiment_factors
from nmt.utils.configs import CONF, dotted_keys, unset_variable_message


def logs_to_wandb(cfg: DictConfig) -> bool:
    """Whether the runs log to W&B (``logger=wandb``, whose factory is ``nmt.training.loggers.wandb_logger``)."""
    return str(OmegaConf.select(cfg, "logger._target_", default="")).endswith(".wandb_logger")


def input_problem(config: DictConfig) -> str | None:
    """One line for the first thing in the sweep's factors or baseline that cannot work, before anything
    runs: an unknown key, a level that is not an option of its group, a baseline that is not a level, a
    report metric the runs do not record."""
    if is_search(config) and (problem := searched_override_problem(config)):
        return problem  # before each level is composed: range(400,3200) is 2,800 of them
    if problem := experiment_grid_problem(config):
        return problem
    try:
        levels = sweep_levels(config)
    except ValueError as err:  # a factor's value refused, or a value of the command line reading an unset variable
        return unset_variable_message(err) or str(err).splitlines()[0]
    problem = settings_problem(config, levels) or levels_problem(levels, config_folders(config))
    problem = problem or spelling_problem(config, levels)
    if problem:
        return problem
    runs = RunConfigs()
    problem = runs.read(config, levels)
    if problem or is_search(config):  # a search's metric is a validation one, checked with the search's own
        return problem
    return metric_problem(config, runs) or baseline_problem(config.get("baseline"), levels)


def experiment_grid_problem(config: DictConfig) -> str | None:
    """An experiment that sets the sweep's factors, under a grid that sets them too: the grid's were composed
    after it, so its levels replaced the experiment's and its other factors were added (a 2 x 2 of the
    experiment ran as the default grid's 2^4, every factor shown as the grid's)."""
    own = experiment_factors(config)
    grid = OmegaConf.select(config, "hydra.runtime.choices.grid", default=None)
    if not own or grid in (None, "none"):
        return None
    grid_file = chosen_file(config, "grid")  # conf/grid/, or a folder hydra.searchpath adds
    theirs = OmegaConf.select(OmegaConf.load(grid_file), "params", default=None) if grid_file else None
    theirs = dict(theirs) if isinstance(theirs, DictConfig) else {}

    def levels_of(value) -> list[str]:  # "layer, rms" and "layer,rms" are one list of levels
        return [v.strip() for v in str(value).split(",")]

    replaced = [k for k in own if k in theirs and levels_of(theirs[k]) != levels_of(own[k])]
    added = [k for k in theirs if k not in own]
    if not replaced and not added:  # the same factors and levels
        return None
    given = any(o.split("=", 1)[0] == "grid" for o in OmegaConf.select(config, "hydra.overrides.task") or [])
    effect = "; ".join(
        part
        for part in (
            f"its levels of {', '.join(replaced)} replace the experiment's" if replaced else "",
            f"it adds {', '.join(added)}" if added else "",
        )
        if part
    )
    name = OmegaConf.select(config, "hydra.runtime.choices.experiment")
    return (
        f"experiment={name} sets the sweep's factors ({', '.join(own)}), and so does grid={grid}"
        f"{'' if given else ' (the default)'}: {effect}. Add grid=none to sweep the "
        "experiment's factors alone, or move them into a grid of their own (conf/grid/<name>.yaml, grid=<name>)"
    )


SET_PER_RUN = {
    "run_dir": "a sweep gives each run its own folder, <sweep folder>/<factor values>; name the sweep's folder "
    "with sweep_name=... (sweeps/<sweep_name>) or hydra.sweep.dir=...",
    "group": "a sweep sets each run's W&B group to the sweep's name; name it with sweep_name=...",
    "tags": "a sweep sets each run's W&B tags to its factor values; leave tags out",
}


# W&B's settings a sweep makes for its runs: given, every run got one name, or the runs' files went to one
# folder and the report run's to the sweep's, where the printed `wandb sync` line looked
WANDB_SET_BY_SWEEP = {
    "logger.name": "a sweep names each W&B run by its factor values (its run folder's name); leave logger.name out",
    "logger.dir": "a sweep keeps the W&B files of its runs and of its report run in <sweep folder>/wandb, where "
    "`wandb sync` and a rerun's superseding find them; place the sweep with sweep_name=... or hydra.sweep.dir=...",
}


def settings_problem(config: DictConfig, levels: dict[str, list[str]]) -> str | None:
    """The settings of the sweep as a whole: its switches, name, level settings, GPU pool, launcher, what
    to do with changed runs, and the sentence its report shows."""
    stray = config.get("grid")
    if stray:  # a conf/grid/ file without its package line: its params landed here, where no sweep reads them
        name = OmegaConf.select(config, "hydra.runtime.choices.grid", default=None) or "..."
        return (
            f"grid={name}: conf/grid/{name}.yaml lacks its first line '# @package hydra.sweeper', so its "
            f"{', '.join(map(str, stray))} became grid.* keys, which no sweep reads: add that line"
        )
    for key in ("plan", "gpu_pool", "gpu_mps"):  # read for their truth: gpu_pool=maybe or 2 turned the pool on
        value = config.get(key, False)
        if not isinstance(value, bool):
            return f"{key}={value!r}: must be true or false"
    problem = sweep_name_problem(config.sweep_name) if "sweep_name" in config else None
    wandb = logs_to_wandb(config)
    for override in config.hydra.overrides.task:
        key = str(override).lstrip("+~").partition("=")[0]
        if key in SET_PER_RUN:  # each run's command sets it after the user's: the given value went unused
            return f"{override}: {SET_PER_RUN[key]}"
        if wandb and key in WANDB_SET_BY_SWEEP:  # one name for every run; runs and report in two folders
            return f"{override}: {WANDB_SET_BY_SWEEP[key]}"
    tuned = OmegaConf.select(config, "hydra.runtime.choices.tuned", default=None)
    given = [o for o in config.hydra.overrides.task if o.lstrip("+~").startswith("level_settings")]
    if tuned and given:  # Hydra merges the two: which settings are the file's, and which would win, is unclear
        return f"{given[0]}: +tuned={tuned} gives the level settings; give them one way, not both"
    settings = level_settings_problem(config.get("level_settings"), levels, from_file=bool(tuned))
    if settings and tuned:  # the settings came from a file: named, as the key the user gave was +tuned=
        settings = f"+tuned={tuned}: {settings}"
    problem = (
        problem
        or settings
        or pool_problem(config, machine=not config.get("plan"))  # a plan made away from the GPUs says so below
        or mps_setting_problem(config)
    )
    if problem:
        return problem
    launcher = OmegaConf.select(config, "hydra.launcher", default=None) or {}
    jobs = launcher.get("n_jobs") if str(launcher.get("_target_", "")).endswith("JoblibLauncher") else None
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs == 0):
        # joblib's ValueError came as a traceback, after the sweep's plan was written
        return f"hydra.launcher.n_jobs={jobs!r}: must be a whole number of runs at once, >= 1 (or -1: one per CPU core)"
    if config.get("on_changed", "stop") not in ("stop", "move"):
        return f"on_changed={config.get('on_changed')!r}: must be one of ['stop', 'move']"
    sentence = config.get("report_sentence")
    if sentence is not None and (not isinstance(sentence, int) or isinstance(sentence, bool) or sentence < 0):
        return f"report_sentence={sentence!r}: must be a test sentence's index, an integer >= 0 (or null)"
    return None


def levels_problem(levels: dict[str, list[str]], folders: tuple[Path, ...] = (CONF,)) -> str | None:
    """A factor that repeats a level, or a level that is not an option of its config group (in any of the
    config ``folders`` Hydra searches: conf/, and those ``hydra.searchpath`` adds)."""
    for key, values in levels.items():
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated and key == "seed":  # seeds are replicates of every cell, not a factor's levels
            return (
                f"seed={','.join(values)}: repeats a seed ({', '.join(repeated)} given {values.count(repeated[0])} "
                "times); give distinct seeds"
            )
        if repeated:
            kind = "has one level" if len(set(values)) == 1 else "repeats a level"
            return (
                f"{key}={','.join(values)}: the factor {kind} ({', '.join(repeated)} given {values.count(repeated[0])} "
                f"times); give distinct levels, or one value to hold {key} constant"
            )
        if (CONF / key).is_dir():
            options = sorted({p.stem for folder in folders for p in (folder / key).glob("*.yaml")})
            for value in values:
                if value not in options and value != "null":
                    close = difflib.get_close_matches(value, options, n=1)
                    hint = f"did you mean {key}={close[0]}? " if close else ""
                    return f"{key}={value}: not an option of group {key}; {hint}valid: {', '.join(options)}"
    return None


def spelling_problem(config: DictConfig, levels: dict[str, list[str]]) -> str | None:
    """A level written otherwise than the same number in the runs already in the sweep's folder (0 where they
    ran as 0.0): its runs would be trained again in folders of their own, beside the finished ones, which the
    report then sets aside as another sweep's."""
    folder = Path(str(OmegaConf.select(config, "hydra.sweep.dir", default="") or ""))
    if not str(folder) or not folder.is_dir():
        return None
    written: dict[str, set[str]] = {}  # key -> its levels as the folders' names write them
    for run in folder.iterdir():
        for part in run.name.split(",") if run.is_dir() else ():
            key, sep, value = part.partition("=")
            if sep:
                written.setdefault(key, set()).add(value)
    for key, values in levels.items():
        for value in (v for v in values if v not in written.get(key, ())):
            old = next((w for w in sorted(written.get(key, ())) if same_level(w, value, key)), None)
            if old is not None:
                return (
                    f"{key}={value}: {folder} holds runs of {key}={old}, the same number written otherwise, which "
                    f"this sweep would train again beside them; write it as they do ({key}={old}), or give the sweep "
                    f"a folder of its own ({own_folder(config)})"
                )
    return None


@dataclass
class RunConfigs:
    """What the configs of a sweep's runs hold, one config composed per choice of groups (the grid may choose
    model=rnn): the metrics their tasks record, the sets they score at the end, what report_metric=auto
    ranks them by."""

    recorded: set[str] = field(default_factory=set)
    scored: set[str] = field(default_factory=set)
    ranked_by: set[str] = field(default_factory=set)

    def read(self, config: DictConfig, levels: dict[str, list[str]]) -> str | None:
        """Compose each run's config and read it; one line for a key that some run's config lacks, a group
        option Hydra cannot compose, or a task that cannot be built."""
        from nmt.tasks import build_task
        from nmt.tasks.base import FINAL_RESULTS

        prefixes = command_prefixes(config.hydra.overrides.task)
        seen = set()
        lacking, had = {}, set()  # key -> the runs' groups whose config lacks it (first seen); keys some config has
        for values in planned_values(config):
            groups = tuple(sorted((k, v) for k, v in values.items() if (CONF / k).is_dir()))
            if groups in seen:
                continue
            seen.add(groups)
            try:
                composed = compose_train(
                    [as_override(k, v, prefixes.get(k, "")) for k, v in values.items() if (CONF / k).is_dir()]
                )
            except Exception as err:  # a group option Hydra cannot compose: its own message says which
                return str(err).splitlines()[0]
            try:
                task = build_task(composed.task)
            except Exception as err:  # noqa: BLE001  a task that cannot be built: its own message says why
                return unset_variable_message(err, composed) or str(err).splitlines()[0] or type(err).__name__
            try:  # the names a run of its task records (a task lists them for empty results)
                self.recorded |= set(task.sweep_metrics({}))
            except Exception as err:  # noqa: BLE001  a task's own code: which, and what it raised
                return (
                    f"task={task.name}: sweep_metrics({{}}) raised {type(err).__name__}: {err}; given no results it "
                    "lists the names a run can record, each None (docs/tasks.md, 'Adding a task')"
                )
            self.ranked_by.add(task.report_metric)  # what report_metric=auto ranks by
            if task.report_metric not in self.recorded:  # the runs would train, then the report fail
                return (
                    f"task={task.name}: its report_metric {task.report_metric} is not among the metrics its "
                    f"sweep_metrics records ({sorted(task.sweep_metrics({}))}); name one of those"
                )
            for split in FINAL_RESULTS:  # the sets the runs of these groups score at the end (a factor, or one value)
                key = f"{split}_after_training"
                switch = levels.get(key) or [str(OmegaConf.select(composed, key, default=False))]
                self.scored |= {split} if any(str(v).lower() == "true" for v in switch) else set()
            for key in values:
                if (CONF / key).is_dir() or prefixes.get(key):
                    continue
                try:
                    found = OmegaConf.select(composed, key, default="__missing__", throw_on_missing=False)
                except InterpolationResolutionError:  # there, its value read from Hydra's (name: ${hydra:...})
                    found = None
                if found != "__missing__":
                    had.add(key)
                elif key not in lacking:
                    close = difflib.get_close_matches(key, dotted_keys(composed), n=2)
                    runs = ",".join(f"{k}={v}" for k, v in groups if len(levels.get(k, [])) > 1)
                    lacking[key] = (runs, f" (did you mean {' or '.join(close)}?)" if close else "")
        for key, (runs, hint) in lacking.items():
            what = "be a factor" if len(levels.get(key, [])) > 1 else f"be set ({key}={','.join(levels.get(key, []))})"
            if key in had and runs:  # a key of other levels' runs (model.d_model under model=transformer,rnn)
                return f"{key}: not a key of the runs of {runs}, so it cannot {what}; sweep those levels apart"
            hint = hint or _replaced_group(config, key) or key_of_another_option(key)
            return f"{key}: not a key of the config, so it cannot {what}{hint}"
        return None


def _replaced_group(config: DictConfig, key: str) -> str:
    """Where the key's group is one the grid sets and the command line gives another option (grid=rnn
    model=transformer: the grid's model.teacher_forcing then belongs to no run), a hint saying so."""
    group = key.split(".")[0]
    grid = OmegaConf.select(config, f"hydra.sweeper.params.{group}", default=None)
    given = [o.partition("=")[2] for o in config.hydra.overrides.task if o.lstrip("+~").partition("=")[0] == group]
    if grid is None or not given or given[-1] == str(grid):
        return ""
    return f" (the grid sets {group}={grid}, and the command line's {group}={given[-1]} replaces it)"


def metric_problem(config: DictConfig, runs: RunConfigs, metric: str | None = None) -> str | None:
    """A report metric (or a search's ``metric``) that no run records, or a final score that no run computes."""
    from nmt.tasks.base import FINAL_RESULTS

    metric = metric or config.get("report_metric", "auto")
    if metric != "auto" and metric not in runs.recorded:  # the report ranks by a metric some run records
        close = difflib.get_close_matches(str(metric), sorted(runs.recorded), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return (
            f"report_metric={metric}: no run of this sweep records it{hint}; they record {sorted(runs.recorded)}, "
            "or auto (the task's own)"
        )
    ranked = next(iter(runs.ranked_by)) if metric == "auto" and len(runs.ranked_by) == 1 else metric
    unscored = [
        s for s, prefix in FINAL_RESULTS.items() if str(ranked).startswith(f"{prefix}_") and s not in runs.scored
    ]
    if unscored:  # the runs trained, then the report failed for want of it
        named = f"report_metric=auto ranks by {ranked}" if metric == "auto" else f"report_metric={metric}"
        return (
            f"{named}: the final model's score on the {unscored[0]} set, and every run of this sweep has "
            f"{unscored[0]}_after_training=false, so none records it; set it true or report a metric recorded "
            "along the way (a best_val_ one)"
        )
    return None


def baseline_problem(baseline, levels: dict[str, list[str]]) -> str | None:
    """A baseline that is not one level of each of some factors."""
    if baseline is not None and not OmegaConf.is_dict(baseline):
        return f"baseline={baseline!r}: expected {{factor: level, ...}}, as baseline={{pos: absolute}}"
    if baseline:
        factors = {k: v for k, v in levels.items() if len(v) > 1 and k != "seed"}
        for key, value in dict(baseline).items():
            if key not in factors:
                return f"baseline: {key} is not a factor of this sweep (factors: {sorted(factors)})"
            if not any(same_level(level, value, key) for level in factors[key]):  # 1 names the level 1.0
                return f"baseline: {key}={value} is not a level of {key} (levels: {factors[key]})"
    return None


def sweep_name_problem(name) -> str | None:
    """sweep_name names a folder under sweeps/: '..' put the sweep's files into the working folder (the
    repository, run from there), '' and '.' into sweeps/ itself, null into sweeps/None."""
    path = Path(str(name))  # a number is its digits (sweep_name=2026): Hydra reads it as an int
    if (
        isinstance(name, str | int)
        and not isinstance(name, bool)
        and str(name).strip()
        and path.parts  # '.', './': sweeps/ itself
        and not path.is_absolute()
        and ".." not in path.parts
    ):
        return None
    return (
        f"sweep_name={name!r}: the name of a folder under sweeps/ (not empty, not absolute, no '..'); a sweep "
        "elsewhere: hydra.sweep.dir=PATH"
    )
