"""A search instead of a grid (``hydra/sweeper=search``): Optuna's sampler chooses each trial's settings from
the validation scores of the trials before it. What a search holds and searches, the validation metric it
follows (never a test score: the test set is scored, not tuned on), the problems refused before any run, its
record of the trials asked and told (``search.json``) and its report (``search.md``).

The sweeper that asks and tells is nmt/sweep/search_sweeper.py; each trial is one run of the sweep, trained by
nmt/sweep/runner.py as a grid's cell is (a finished run is reused on a rerun, a stopped one resumed). A search
narrows a range; the few settings it ranks first are then compared over seeds by a grid, which
``sweep.py tune`` chooses from (the report says how).
"""

import math
from pathlib import Path

from omegaconf import DictConfig

from nmt.metrics import lower_is_better
from nmt.sweep.document import fmt
from nmt.sweep.levels import override_pairs
from nmt.sweep.records import RESULT, read_record
from nmt.utils.io import atomic_write_json, atomic_write_text

SEARCH = "search.json"  # the search's settings and each trial asked: its overrides, run folder, state and value
REPORT = "search.md"
FAILED_STATE, DONE_STATE, ASKED_STATE = "failed", "done", "asked"  # a trial asked, not yet told


def _parsed(config: DictConfig):
    """The sweeper's params, then the command line's overrides of sweep keys, parsed as Hydra reads them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    given = [o for o in config.hydra.overrides.task if o.lstrip("+~").partition("=")[0] in dict(override_pairs([o]))]
    return OverridesParser.create().parse_overrides(params + given)


def held_values(config: DictConfig) -> dict[str, str]:
    """Each key the search holds at one value (the sweeper's params' and the command line's), as typed."""
    held = {}
    for override in _parsed(config):
        if not override.is_sweep_override():
            held[override.key_or_group] = override.input_line.partition("=")[2]
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


def search_problem(config: DictConfig, metric: str) -> str | None:
    """One line for a search that cannot be run as asked: nothing searched, the seed searched, a baseline, a
    direction against the metric's, a sampler without a seed, a storage of its own. (A grid sampler is refused
    by Hydra, as the search's sampler seed is not one of its keys: sweep.py without a search is the grid.)"""
    sweeper = config.hydra.sweeper
    space = searched(config)
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
    if sweeper.get("custom_search_space"):
        return "hydra.sweeper.custom_search_space: not read by this sweeper; search keys on the command line"
    if not isinstance(sweeper.get("n_trials"), int) or sweeper.n_trials < 1:
        return f"hydra.sweeper.n_trials={sweeper.get('n_trials')}: give the number of trials, 1 or more"
    if not isinstance(sweeper.get("n_jobs"), int) or sweeper.n_jobs < 1:
        return f"hydra.sweeper.n_jobs={sweeper.get('n_jobs')}: give the trials asked at once, 1 or more"
    return None


def search_settings(config: DictConfig, metric: str) -> dict:
    """What search.json and the report say of the search as a whole."""
    sampler = config.hydra.sweeper.get("sampler") or {}
    return {
        "metric": metric,
        "direction": "minimize" if lower_is_better(metric) else "maximize",
        "space": searched(config),
        "held": held_values(config),
        "n_trials": int(config.hydra.sweeper.n_trials),
        "n_jobs": int(config.hydra.sweeper.n_jobs),
        "sampler": str(sampler.get("_target_", "")).rpartition(".")[2],
        "sampler_seed": sampler.get("seed"),
    }


def read_search(sweep_dir: Path) -> dict:
    """search.json (empty before a search has asked a trial)."""
    import json

    path = Path(sweep_dir) / SEARCH
    return json.loads(path.read_text()) if path.is_file() else {}


def write_search(sweep_dir: Path, settings: dict, trials: list[dict]) -> None:
    atomic_write_json(Path(sweep_dir) / SEARCH, {**settings, "trials": trials})


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


def write_search_report(sweep_dir: Path) -> Path:
    """search.md: the trials ranked by their validation metric, the failed ones with their errors, the best
    trial's settings, and how to confirm the first few over seeds before a factorial takes them."""
    sweep_dir = Path(sweep_dir)
    search = read_search(sweep_dir)
    metric, space = search["metric"], search["space"]
    ranked = ranked_trials(search)
    better = "lower" if search["direction"] == "minimize" else "higher"
    seeds = sorted({str(t["values"].get("seed", "")) for t in search["trials"]} - {""})
    lines = [
        f"# Search {sweep_dir.name}",
        "",
        f"{len(search['trials'])} trials of {search['n_trials']}, each one run at seed {', '.join(seeds) or '?'}; "
        f"each trial's settings chosen by Optuna's {search['sampler']} (seed {search['sampler_seed']}) from the "
        f"trials before it, {search['n_jobs']} asked at once. Ranked by {metric} (validation, {better} is better): "
        "the test set was not read to choose.",
        "",
        "Searched: " + "; ".join(f"`{k}={v}`" for k, v in space.items()),
        "",
    ]
    keys = list(space)
    header = ["rank", "trial", *keys, metric, "epochs", "ended by", "run"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rank, trial in enumerate(ranked, 1):
        record = _record(sweep_dir / trial["run"])
        row = [str(rank), str(trial["number"]), *(_shown(trial["values"].get(k)) for k in keys), fmt(trial["value"])]
        row += [str(record.get("epochs", "")), str(record.get("ended_by") or ""), trial["run"]]
        lines.append("| " + " | ".join(row) + " |")
    failed = [t for t in search["trials"] if t.get("state") == FAILED_STATE]
    if failed:
        lines += ["", f"Failed ({len(failed)}; told to the sampler as failed, not scored):"]
        lines += [f"- trial {t['number']} ({t['run']}): {t.get('error') or 'no score'}" for t in failed]
    if ranked:
        best = ranked[0]
        held = " ".join(f"{k}={_shown(best['values'][k])}" for k in keys)
        lines += ["", f"Best: trial {best['number']}, {held}: {metric} {fmt(best['value'])}."]
        lines += ["", *_confirm_lines(ranked, keys, search.get("held") or {})]
    atomic_write_text(sweep_dir / REPORT, "\n".join(lines) + "\n")
    return sweep_dir / REPORT


def _confirm_lines(ranked: list[dict], keys: list[str], held: dict[str, str]) -> list[str]:
    """Each trial ran one seed, so a lead smaller than the seeds' scatter is not established: the command of a
    grid over the first trials' values and three seeds of their own, which ``sweep.py tune`` chooses from."""
    first = ranked[:3]
    levels = {k: sorted({_shown(t["values"][k]) for t in first}, key=_order) for k in keys}
    grid = " ".join(f"{k}={','.join(v)}" for k, v in levels.items())
    held = " ".join(f"{k}={v}" for k, v in held.items() if k not in ("seed", "grid"))
    return [
        f"Each trial is one run at one seed: a lead smaller than the scatter between seeds is not established. "
        f"Before a factorial takes these settings, compare the first {len(first)} over seeds (a grid: it crosses "
        "their values), with the search's other settings:",
        "",
        f"    python sweep.py grid=none {held} {grid} seed=201,202,203 sweep_name=<name>",
        "    python sweep.py tune sweeps/<name> --level <the level they are for> --out conf/tuned/<name>.yaml",
    ]


def _shown(value) -> str:
    """A sampled value as it would be typed: floats to 4 significant digits (their runs hold the exact value)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _order(text: str):
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def _record(run_dir: Path) -> dict:
    try:
        return read_record(run_dir / RESULT)
    except (OSError, ValueError):
        return {}


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


def print_search_plan(sweep_dir: Path, config: DictConfig, settings: dict, changed: dict) -> None:
    """What the search would do, without training: its space, what it holds, its metric, the trials asked so
    far and the expected cost of the rest."""
    from nmt.sweep.plan import _recipe_lines, planned_values
    from nmt.sweep.summary import run_cost_s

    print(f"Search {sweep_dir.name} in {sweep_dir}")
    for key, text in settings["space"].items():
        print(f"  searched: {key}={text}")
    held = held_values(config)
    print(f"  held: {' '.join(f'{k}={v}' for k, v in held.items()) or 'nothing'}")
    better = "lower" if settings["direction"] == "minimize" else "higher"
    print(
        f"  {settings['n_trials']} trials, {settings['n_jobs']} asked at once, each one run at seed "
        f"{held.get('seed', config.get('seed'))}; chosen by {settings['sampler']} (seed {settings['sampler_seed']}) "
        f"from the {settings['metric']} of the trials before (validation, {better} is better)"
    )
    for line in _recipe_lines(config, planned_values(config)):
        print(f"  {line}")
    trials = read_search(sweep_dir).get("trials", [])
    done = [t for t in trials if t.get("state") == DONE_STATE]
    failed = [t for t in trials if t.get("state") == FAILED_STATE]
    left = max(settings["n_trials"] - len(done) - len(failed), 0)
    print(
        f"  trials asked before: {len(trials)} ({len(done)} done, {len(failed)} failed): a rerun asks them again and "
        f"reuses their runs; trials to run: {left}"
    )
    walls = [run_cost_s(r) for t in done if (r := _record(sweep_dir / t["run"]))]
    if changed:
        print("  expected cost: none: the search would stop first (below)")
    elif walls and left:
        hours = sum(walls) / len(walls) * left / 3600
        cost = f"{hours:.1f} h" if hours >= 0.1 else f"{hours * 60:.1f} min"
        print(f"  expected cost: about {cost} of run time (the mean of its {len(walls)} finished runs)")
    else:
        print("  expected cost: " + ("nothing left to run" if not left else "unknown until a trial has finished"))
    for name, found in changed.items():
        print(f"  under other settings: {name}: {'; '.join(found[:4])}")
