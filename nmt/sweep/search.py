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
    from omegaconf import OmegaConf

    sweeper = config.hydra.sweeper
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
    from omegaconf import OmegaConf

    sampler = config.hydra.sweeper.get("sampler") or {}
    return {
        # what decides which trials are asked, beside the scores told: a rerun that changed one would ask others
        "asked_by": {
            "space": searched(config),
            "metric": metric,
            "n_jobs": int(config.hydra.sweeper.n_jobs),
            "sampler": OmegaConf.to_container(sampler, resolve=True) if sampler else {},
        },
        "metric": metric,
        "direction": "minimize" if lower_is_better(metric) else "maximize",
        "space": searched(config),
        "held": held_values(config),
        "n_trials": int(config.hydra.sweeper.n_trials),
        "n_jobs": int(config.hydra.sweeper.n_jobs),
        "sampler": str(sampler.get("_target_", "")).rpartition(".")[2],
        "sampler_seed": sampler.get("seed"),
    }


def other_search(before: dict, settings: dict) -> str | None:
    """How a search already in the folder (its plan's settings) differs in what decides its trials from this
    one: a rerun asks the same trials only where the range, metric, batch and sampler are the same."""
    was, now = before.get("asked_by") or {}, settings["asked_by"]
    for key, what in (
        ("space", "searches"),
        ("metric", "follows"),
        ("n_jobs", "asks at once"),
        ("sampler", "samples by"),
    ):
        if was.get(key) != now[key]:
            return f"it {what} {_said(was.get(key))}, this one {_said(now[key])}"
    return None


def _said(value) -> str:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "nothing"
    return str(value)


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


def settled(sweep_dir: Path, search: dict) -> dict:
    """The search with each trial asked but not told (a search stopped while it waited) settled from its run's
    record where the run finished: what ``sweep.py report`` shows of a stopped search."""
    trials = []
    for trial in search.get("trials", []):
        if (
            trial.get("state") == ASKED_STATE
            and (value := trial_value(_record(sweep_dir / trial["run"]), search["metric"])) is not None
        ):
            trial = {**trial, "state": DONE_STATE, "value": value}
        trials.append(trial)
    return {**search, "trials": trials}


def write_search_report(sweep_dir: Path) -> Path:
    """search.md: the trials ranked by their validation metric, the failed ones with their errors, the best
    trial's settings (said where it ties or lies at the end of a range), and how to compare the first few over
    seeds before a factorial takes them."""
    sweep_dir = Path(sweep_dir)
    search = settled(sweep_dir, read_search(sweep_dir))
    metric, space = search["metric"], search["space"]
    ranked = ranked_trials(search)
    better = "lower" if search["direction"] == "minimize" else "higher"
    seeds = sorted({str(t["values"].get("seed", "")) for t in search["trials"]} - {""})
    waiting = sum(t.get("state") == ASKED_STATE for t in search["trials"])
    lines = [
        f"# Search {sweep_dir.name}",
        "",
        f"{len(search['trials'])} trials of {search['n_trials']}, each one run at seed {', '.join(seeds) or '?'}; "
        f"each trial's settings chosen by Optuna's {search['sampler']} (seed {search['sampler_seed']}) from the "
        f"trials before it, {search['n_jobs']} asked at once. Ranked by {metric} (validation, {better} is better): "
        "the test set was not read to choose."
        + (f" {waiting} trial(s) unfinished: the search was stopped; rerun it to go on." if waiting else ""),
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
        lines += ["", f"Failed ({len(failed)}; told to the sampler as failed, not scored; a rerun runs them again):"]
        lines += [f"- trial {t['number']} ({t['run']}): {t.get('error') or 'no score'}" for t in failed]
    if ranked:
        best = ranked[0]
        lines += ["", f"Best: trial {best['number']}, {_settings_of(best, keys)}: {metric} {fmt(best['value'])}."]
        tied = [t for t in ranked if t["value"] == best["value"]]
        if len(tied) > 1:
            lines.append(
                f"It ties with trials {', '.join(str(t['number']) for t in tied[1:])}: "
                f"{metric} does not tell them apart, and the first asked is shown first. Give the runs a budget or "
                "a metric that separates them."
            )
        lines += [f"{line}." for line in _at_the_edge(best, space)]
        lines += ["", *_confirm_lines(ranked, keys, search)]
    atomic_write_text(sweep_dir / REPORT, "\n".join(lines) + "\n")
    return sweep_dir / REPORT


def _at_the_edge(trial: dict, space: dict[str, str]) -> list[str]:
    """The searched intervals whose end the trial's value lies at (within 5% of the range, on the log scale
    for a log range): a wider range may hold a better value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    said = []
    for key, text in space.items():
        override = OverridesParser.create().parse_override(f"{key}={text}")
        if not override.is_interval_sweep() or not isinstance(trial["values"].get(key), int | float):
            continue
        interval = override.value()
        low, high, value = float(interval.start), float(interval.end), float(trial["values"][key])
        if "log" in interval.tags and low > 0:
            low, high, value = math.log(low), math.log(high), math.log(value)
        where = (value - low) / (high - low) if high > low else 0.5
        if where < 0.05 or where > 0.95:
            end = interval.start if where < 0.05 else interval.end
            said.append(f"Its {key} lies at the end of the range searched ({end}): a wider range may hold better")
    return said


def _confirm_lines(ranked: list[dict], keys: list[str], search: dict) -> list[str]:
    """Each trial ran one seed, so a lead smaller than the seeds' scatter is not established: the commands that
    run the first trials again over seeds of their own, with the search's other settings, and ``sweep.py
    tune``, which chooses between them on the metric the search followed (one grid where one key was searched;
    a sweep per trial otherwise, which ``tune`` pools: a grid would cross their values)."""
    first, metric = ranked[:3], search["metric"]
    held = search.get("held") or {}
    held = " ".join(f"{k}={v}" for k, v in held.items() if k not in ("seed", "grid"))
    common = f"python sweep.py grid=none {held} report_metric={metric}"
    if len(keys) == 1:
        values = ",".join(sorted({_shown(t["values"][keys[0]]) for t in first}, key=_order))
        commands = [f"{common} {keys[0]}={values} seed=201,202,203 sweep_name=<name>"]
        folders = "sweeps/<name>"
    else:
        commands = [
            f"{common} {_settings_of(t, keys)} seed=201,202,203 sweep_name=<name>_t{t['number']}" for t in first
        ]
        folders = " ".join(f"sweeps/<name>_t{t['number']}" for t in first)
    return [
        "Each trial is one run at one seed: a lead smaller than the scatter between seeds is not established. "
        f"Before a factorial takes these settings, run the first {len(first)} again over seeds of their own, then "
        f"let `sweep.py tune` choose on {metric} (values as shown here, to 4 digits):",
        "",
        *(f"    {command}" for command in commands),
        f"    python sweep.py tune {folders} --level <the factor they are for, e.g. optim> --metric {metric} "
        "--out conf/tuned/<name>.yaml",
    ]


def _settings_of(trial: dict, keys: list[str]) -> str:
    return " ".join(f"{k}={_shown(trial['values'][k])}" for k in keys)


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
        f"reuses their runs; trials to run: {left} new"
        + (f", and the {len(failed)} failed ones again" if failed else "")
    )
    walls = [run_cost_s(r) for t in done if (r := _record(sweep_dir / t["run"]))]
    if changed:
        print("  expected cost: none: the search would stop first (below)")
    elif walls and left + len(failed):
        hours = sum(walls) / len(walls) * (left + len(failed)) / 3600
        cost = f"{hours:.1f} h" if hours >= 0.1 else f"{hours * 60:.1f} min"
        print(f"  expected cost: about {cost} of run time (the mean of its {len(walls)} finished runs)")
    else:
        print(
            "  expected cost: "
            + ("nothing left to run" if not left + len(failed) else "unknown until a trial has finished")
        )
    for name, found in changed.items():
        print(f"  under other settings: {name}: {'; '.join(found[:4])}")
