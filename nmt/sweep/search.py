"""A search instead of a grid (``hydra/sweeper=search``): Optuna's sampler chooses each trial's settings from
the validation scores of the trials before it. What a search holds and searches, the validation metric it
follows (never a test score: the test set is scored, not tuned on), the problems refused before any run, and
its record of the trials asked and told (``search.json``), which a rerun replays.

The sweeper that asks and tells is nmt/sweep/search_sweeper.py; each trial is one run of the sweep, trained by
nmt/sweep/runner.py as a grid's cell is (a finished run is reused on a rerun, a stopped one resumed). The report
is nmt/sweep/search_report.py: a search narrows a range, and the few settings it ranks first are then compared
over seeds, which ``sweep.py tune`` chooses from.
"""

import math
from pathlib import Path

from omegaconf import DictConfig

from nmt.metrics import lower_is_better
from nmt.sweep.levels import override_pairs
from nmt.utils.io import atomic_write_json

SEARCH = "search.json"  # the search's settings and each trial asked: its overrides, run folder, state and value
REPORT = "search.md"
REPORT_PAGE = "search.html"  # the same report, self-contained, figures embedded
FAILED_STATE, DONE_STATE, ASKED_STATE = "failed", "done", "asked"  # asked: not told (not run, or stopped)
SWEEPER = "hydra_plugins.nmt_search_sweeper.search_sweeper.SearchSweeper"  # conf/hydra/sweeper/search.yaml's


def _parsed(config: DictConfig):
    """The sweeper's params, then the command line's overrides of sweep keys, parsed as Hydra reads them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    given = [o for o in config.hydra.overrides.task if o.lstrip("+~").partition("=")[0] in dict(override_pairs([o]))]
    return OverridesParser.create().parse_overrides(params + given)


def held_values(config: DictConfig) -> dict[str, str]:
    """Each setting of its runs the search holds at one value (the sweeper's params' and the command line's;
    its seed included), as typed."""
    held = {}
    for override in _parsed(config):
        if not override.is_sweep_override():
            held[override.key_or_group] = override.input_line.partition("=")[2]
        else:
            held.pop(override.key_or_group, None)
    return held


# the sweep's own keys that say nothing of how its runs train: a command running the trials again sets its own
NOT_RUN_SETTINGS = (
    "grid",
    "seed",
    "sweep_name",
    "report_metric",
    "report_sentence",
    "baseline",
    "plan",
    "on_changed",
    "start_runs_for",
)


def held_lines(config: DictConfig) -> dict[str, str]:
    """Each held key's override as typed, prefix and quotes kept (``+tuned=x``, ``~key``, ``k='a b'``), the
    sweep's own that shape its runs included (``+tuned=``, ``level_settings=``, a GPU pool's): what a command
    that runs the same settings again must say."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    given = [o for o in config.hydra.overrides.task if not o.lstrip("+~").startswith("hydra")]
    held = {}
    for override in OverridesParser.create().parse_overrides(params + given):
        if override.key_or_group in NOT_RUN_SETTINGS:
            continue
        if not override.is_sweep_override():
            held[override.key_or_group] = override.input_line
        else:
            held.pop(override.key_or_group, None)
    return held


def searched(config: DictConfig) -> dict[str, str]:
    """Each searched key with its range as written (``tag(log, interval(1e-4, 1e-2))``, ``choice(a,b)``); a key
    the command line holds at one value is not searched, whatever the sweeper's params say of it."""
    found = {}
    for override in _parsed(config):
        if override.is_sweep_override():
            found[override.key_or_group] = override.input_line.partition("=")[2]
        else:
            found.pop(override.key_or_group, None)
    return found


def search_metric(config: DictConfig, ranked_by: str | None) -> str:
    """The validation metric the search follows: report_metric, or for auto the validation counterpart of the
    score the runs' task ranks by (test_bleu -> best_val_bleu, the best along each run as its checkpoints kept
    it). ValueError for a test score, or one recorded at no validation."""
    metric = str(config.get("report_metric", "auto"))
    if metric == "auto":
        if not ranked_by:
            raise ValueError("report_metric=auto: the runs rank by several scores; name the validation one to follow")
        metric = "best_val_" + ranked_by.removeprefix("test_")
    if not metric.startswith(("best_val_", "final_val_", "val_")):
        raise ValueError(
            f"report_metric={metric}: a search follows a validation score, as tuning chooses on validation data (the "
            "test set is scored, never tuned on): give best_val_bleu, val_as_test_bleu (the final model decoding "
            "the validation set as the test is decoded), final_val_loss, best_val_ppl, ... or auto"
        )
    return metric


def searched_override_problem(config: DictConfig) -> str | None:
    """A searched key written as a search cannot take it: ``range(a,b)`` (the plugin draws its end ``b`` too,
    which Hydra's range leaves out), a prefix or a package. Checked before the levels are composed as a grid's
    would be: ``range(400,3200)`` took minutes to compose, one cell a level, before it was refused."""
    for override in _parsed(config):
        if not override.is_sweep_override():
            continue
        if override.is_range_sweep():
            return (
                f"{override.input_line}: in a search, the sampler would draw range's end too, unlike a grid; give "
                f"{override.key_or_group}=int(interval(a,b)) or choice(...)"
            )
        if override.input_line[:1] in "+~" or override.package:
            return (
                f"{override.input_line}: a searched key is written without a prefix or package "
                f"({override.key_or_group}=...)"
            )
        if override.is_interval_sweep():  # Optuna's "low value must be smaller ..." named no key
            interval = override.value()
            if interval.start > interval.end:
                return (
                    f"{override.input_line}: the interval runs from {interval.start} down to {interval.end}; write "
                    f"its low end first: interval({interval.end},{interval.start})"
                )
    return None


def search_problem(config: DictConfig, metric: str) -> str | None:
    """One line for a search that cannot be run as asked: nothing searched, the seed searched, a baseline, a
    direction against the metric's, a sampler without a seed, a storage of its own. (A grid sampler is refused
    by Hydra, as the search's sampler seed is not one of its keys: sweep.py without a search is the grid.)"""
    from omegaconf import OmegaConf

    sweeper = config.hydra.sweeper
    if str(sweeper.get("_target_")) != SWEEPER:  # the plugin's own, say: it stops at a failed trial, cannot resume
        return (
            f"hydra.sweeper._target_={sweeper.get('_target_')}: a search of this project's runs goes through "
            "hydra/sweeper=search (the same Optuna sampler and settings, and a loop that goes on past a failed "
            "trial and resumes)"
        )
    space = searched(config)
    typed = {o.lstrip("+~").partition("=")[0] for o in config.hydra.overrides.task}
    from_grid = sorted(k for k in space if k in (sweeper.get("params") or {}) and k not in typed)
    grid = OmegaConf.select(config, "hydra.runtime.choices.grid", default=None)
    if from_grid and "grid" not in typed:  # the default grid: its factors would be searched unasked
        return (
            f"the default grid={grid} would add {', '.join(from_grid)} to the search as choices; give grid=none to "
            f"search only what the command line ranges, or grid={grid} to search its factors too"
        )
    if not space:
        return (
            "hydra/sweeper=search: no key is searched; give one a range, e.g. 'optim.optimizer.lr=tag(log,"
            "interval(1e-4,1e-2))', 'warmup=int(interval(400,3200))' or 'pos=choice(absolute,rope)'"
        )
    if "seed" in space:
        return (
            f"seed={space['seed']}: a search trains each trial at one seed (hold it: seed=101); a seed is noise, not a "
            "setting to choose. Compare the trials it ranks first over seeds afterwards (the report says how)"
        )
    if problem := searched_override_problem(config):
        return problem
    if config.get("baseline"):
        return "baseline: a search has no cells to test against a baseline; give none (a grid's report tests them)"
    direction = str(sweeper.get("direction", "auto")).rpartition(".")[2]  # Direction.maximize or maximize
    wanted = "minimize" if lower_is_better(metric) else "maximize"
    if direction not in ("auto", wanted):
        better = "lower" if wanted == "minimize" else "higher"
        return f"hydra.sweeper.direction={direction}: {metric} is better {better}; give {wanted} or auto"
    sampler = sweeper.get("sampler") or {}
    if "seed" in sampler and sampler.get("seed") is None:
        return (
            "hydra.sweeper.sampler.seed=null: a rerun would ask other trials than the first sitting's, whose runs "
            "it could then not reuse; give a seed (hydra.sweeper.sampler.seed=1)"
        )
    if sweeper.get("storage"):
        return (
            f"hydra.sweeper.storage={sweeper.storage}: a search's record is its folder (its runs and {SEARCH}); a "
            "rerun asks the same trials again and reuses their runs. Give no storage"
        )
    for key in ("custom_search_space", "search_space"):
        if sweeper.get(key):
            return f"hydra.sweeper.{key}: not read by this sweeper; give the ranges as overrides ('key=interval(a,b)')"
    if not isinstance(sweeper.get("n_trials"), int) or sweeper.n_trials < 1:
        return f"hydra.sweeper.n_trials={sweeper.get('n_trials')}: give the number of trials, 1 or more"
    if not isinstance(sweeper.get("n_jobs"), int) or sweeper.n_jobs < 1:
        return f"hydra.sweeper.n_jobs={sweeper.get('n_jobs')}: give the trials asked at once, 1 or more"
    return _not_for_a_search(config)


def _not_for_a_search(config: DictConfig) -> str | None:
    """A sweep setting that does nothing in a search, or that the search's batches leave idle."""
    n_jobs = int(config.hydra.sweeper.n_jobs)
    launcher = str(config.hydra.get("launcher", {}).get("_target_", ""))
    side_by_side = int(config.hydra.launcher.get("n_jobs") or 1) if "n_jobs" in config.hydra.launcher else None
    if n_jobs > 1 and (launcher.endswith("BasicLauncher") or (side_by_side is not None and side_by_side < n_jobs)):
        return (
            f"hydra.sweeper.n_jobs={n_jobs}: the trials asked together would run {side_by_side or 1} at a time; "
            f"add hydra/launcher=joblib hydra.launcher.n_jobs={n_jobs} to run them side by side, or ask fewer"
        )
    if config.get("gpu_pool"):
        from nmt.sweep.gpus import visible_gpus

        per_gpu = int(config.get("runs_per_gpu", 1))
        places = max(len(visible_gpus()) * per_gpu // max(int(config.get("gpus_per_run", 1)), 1), per_gpu)
        if places > n_jobs:  # at least runs_per_gpu, where this machine sees no GPU (a plan made elsewhere)
            return (
                f"gpu_pool: the GPUs take {places} runs at once, and a search launches hydra.sweeper.n_jobs={n_jobs} "
                "trial(s) at once, so places stay empty; give hydra.sweeper.n_jobs (and the launcher's) that many"
            )
    if config.get("on_changed", "stop") != "stop":
        return (
            f"on_changed={config.on_changed}: a grid's; a search asks its trials again, so runs made under other "
            "settings cannot be run afresh in its folder: give the search its own sweep_name"
        )
    if config.get("report_sentence", 0):
        return f"report_sentence={config.report_sentence}: a search's report shows no test sentence (validation only)"
    return None


def search_settings(config: DictConfig, metric: str) -> dict:
    """What search.json and the report say of the search as a whole."""
    from omegaconf import OmegaConf

    sampler = config.hydra.sweeper.get("sampler") or {}
    return {
        # what the trials asked before mean: their ranges, what they were scored by, the seed they ran at and
        # the sampler that chose them (a search of another of these in the same folder would mix two records)
        "asked_by": {
            "space": _distributions(config),
            "metric": metric,
            "n_jobs": int(config.hydra.sweeper.n_jobs),  # a batch is asked without the scores of its own
            "seed": held_values(config).get("seed", str(config.get("seed"))),
            "sampler": OmegaConf.to_container(sampler, resolve=True) if sampler else {},
        },
        "metric": metric,
        "direction": "minimize" if lower_is_better(metric) else "maximize",
        "space": searched(config),
        "held": held_values(config),
        "held_lines": list(held_lines(config).values()),
        "n_trials": int(config.hydra.sweeper.n_trials),
        "n_jobs": int(config.hydra.sweeper.n_jobs),
        "sampler": str(sampler.get("_target_", "")).rpartition(".")[2],
        "sampler_seed": sampler.get("seed"),
    }


def other_search(before: dict, settings: dict) -> str | None:
    """How a search already in the folder (its plan's settings) differs from this one in what decides its
    trials: a rerun asks them again only as the same search (its n_trials may change)."""
    was, now = before.get("asked_by") or {}, settings["asked_by"]
    for key, what in (
        ("space", "searches"),
        ("metric", "follows"),
        ("seed", "runs at seed"),
        ("n_jobs", "asks at once"),
        ("sampler", "samples by"),
    ):
        if was.get(key) != now[key]:
            return f"it {what} {_said(was.get(key))}, this one {_said(now[key])}"
    return None


def _distributions(config: DictConfig) -> dict[str, str]:
    """Each searched key's range as the sampler draws from it (``interval(1e-4, 1e-2)`` and
    ``interval(0.0001,0.01)`` alike), read by the plugin's own parser."""
    from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override

    space = searched(config)
    return {
        o.key_or_group: repr(create_optuna_distribution_from_override(o))
        for o in _parsed(config)
        if o.key_or_group in space
    }


def _said(value) -> str:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "nothing"
    return str(value)


def read_search(sweep_dir: Path, name: str = SEARCH) -> dict:
    """search.json (empty before a search has asked a trial)."""
    import json

    path = Path(sweep_dir) / name
    return json.loads(path.read_text()) if path.is_file() else {}


def write_search(sweep_dir: Path, settings: dict, trials: list[dict], name: str = SEARCH) -> None:
    atomic_write_json(Path(sweep_dir) / name, {**settings, "trials": trials})


def trial_value(record: dict | None, metric: str) -> float | None:
    """A finished run's value of the metric; None where it failed or recorded none (nan: a run that diverged)."""
    value = ((record or {}).get("metrics") or {}).get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def ranked_trials(search: dict) -> list[dict]:
    """The told trials, best first (ties by trial number)."""
    told = [t for t in search.get("trials", []) if t.get("state") == DONE_STATE]
    sign = 1 if search.get("direction") == "minimize" else -1
    return sorted(told, key=lambda t: (sign * t["value"], t["number"]))


def trial_runs(sweep_dir: Path, config: DictConfig) -> dict[str, dict]:
    """The run folder of each trial asked so far, with the values its run would get now: the settings this
    command holds, the trial's own sampled values and seed (a rerun asks the same trials; were a held setting
    changed since, their finished runs would be of other settings, which the sweep's start refuses)."""
    held = held_values(config)
    runs = {}
    for trial in read_search(sweep_dir).get("trials", []):
        values = {**held, **{k: str(v) for k, v in trial["values"].items()}}
        runs[trial["run"]] = values
    return runs
