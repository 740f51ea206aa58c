"""A search's report (``search.md``): its trials ranked by the validation metric it followed, the failed ones,
the best trial (where it ties or lies at a range's end), and the commands that compare its first trials over
seeds; and what ``plan=true`` prints of a search. The search itself: nmt/sweep/search.py."""

import math
import shlex
from pathlib import Path

from omegaconf import DictConfig

from nmt.metrics import lower_is_better, metric_range
from nmt.sweep.document import Document, fmt, literal
from nmt.sweep.figures import search_history, search_slices
from nmt.sweep.records import RESULT, read_record
from nmt.sweep.search import (
    ASKED_STATE,
    DONE_STATE,
    FAILED_STATE,
    REPORT,
    REPORT_PAGE,
    held_values,
    ranked_trials,
    read_search,
    trial_value,
)
from nmt.sweep.summary import planned
from nmt.utils.io import atomic_write_text


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
    """search.md and search.html (the same report, self-contained): the trials ranked by their validation
    metric, two figures (each trial's score in the order asked, with the best so far; the score against each
    searched setting), the failed trials with their errors, the best trial's settings (said where it ties or
    lies at the end of a range), and how to compare the first few over seeds before a factorial takes them."""
    sweep_dir = Path(sweep_dir)
    # the plan's settings where no trial was asked yet (a search stopped before its first): an empty report
    search = settled(sweep_dir, {"trials": [], **planned(sweep_dir).get("search", {}), **read_search(sweep_dir)})
    metric, space = search["metric"], search["space"]
    ranked = _distinct(ranked_trials(search))
    better = "lower" if search["direction"] == "minimize" else "higher"
    seeds = sorted({str(t["values"].get("seed", "")) for t in search["trials"]} - {""})
    waiting = sum(t.get("state") == ASKED_STATE for t in search["trials"])
    doc = Document(f"Search {sweep_dir.name}")
    doc.paragraph(
        f"{len(search['trials'])} trials of {search['n_trials']}, each one run at seed {', '.join(seeds) or '?'}; "
        f"each trial's settings chosen by Optuna's {search['sampler']} (seed {search['sampler_seed']}) from the "
        f"trials before it, {search['n_jobs']} asked at once. Ranked by {metric} (validation, {better} is better): "
        "the test set was not read to choose."
        + (f" {waiting} trial(s) unfinished: the search was stopped; rerun it to go on." if waiting else "")
    )
    doc.paragraph("Searched: " + "; ".join(f"`{k}={v}`" for k, v in space.items()))
    keys = list(space)
    rows = []
    for rank, trial in enumerate(ranked, 1):
        record = _record(sweep_dir / trial["run"])
        numbers = ", ".join(str(n) for n in trial["numbers"])  # a run the sampler asked for again: one row
        row = [str(rank), numbers, *(_shown(trial["values"].get(k)) for k in keys), fmt(trial["value"])]
        rows.append([*row, str(record.get("epochs", "")), str(record.get("ended_by") or ""), trial["run"]])
    doc.table(["rank", "trial", *keys, metric, "epochs", "ended by", "run"], rows)
    _figures(doc, sweep_dir, search, ranked)
    in_warmup = [t for t in ranked if _record(sweep_dir / t["run"]).get("stopped_in_warmup")]
    if in_warmup:  # recorded by the run: its patience ran out before its rate peaked
        numbers = ", ".join(str(n) for t in in_warmup for n in t["numbers"])
        doc.paragraph(
            f"Trials {numbers} were stopped by early stopping inside their learning rate's warm-up (scoring "
            f"{', '.join(fmt(t['value']) for t in in_warmup)}): the patience counted from the start, so the stopping "
            "rule, not the setting alone, ranked them. early_stopping.after_warmup=true counts it from the end of "
            "each run's warm-up."
        )
    unlearnt = [  # runs recorded before the above: the worst score the metric allows, then stopped early
        t
        for t in ranked
        if "stopped_in_warmup" not in (record := _record(sweep_dir / t["run"]))
        and t["value"] == metric_range(metric)[1 if lower_is_better(metric) else 0]
        and "early" in str(record.get("ended_by") or "")
    ]
    if unlearnt:
        numbers = ", ".join(str(n) for t in unlearnt for n in t["numbers"])
        doc.paragraph(
            f"Trials {numbers} scored {fmt(unlearnt[0]['value'])} and were stopped early: they had learned nothing "
            "when the patience ran out (counted from the start, unless early_stopping.after_warmup=true counted it "
            "from the end of each run's warm-up): the stopping rule, not the setting alone, ranked them."
        )
    failed = [t for t in search["trials"] if t.get("state") == FAILED_STATE]
    if failed:
        doc.paragraph(f"Failed ({len(failed)}; not scored, so the sampler learns nothing from them):")
        doc.items(
            f"trial {t['number']} ({literal(t['run'])}): {literal(' '.join(str(t.get('error') or 'no score').split()))}"
            + (
                "; its run failed: a rerun runs it again"
                if t.get("rerun")
                else "; its record is kept: a rerun reuses it"
            )
            for t in failed
        )
    if ranked:
        best = ranked[0]
        said = [f"Best: trial {best['number']}, {literal(_settings_of(best, keys))}: {metric} {fmt(best['value'])}."]
        tied = [t for t in ranked if t["value"] == best["value"]]
        if len(tied) > 1:
            said.append(
                f"It ties with trials {', '.join(str(t['number']) for t in tied[1:])}, run with other settings: "
                f"{metric} does not tell them apart, and the first asked is shown first. Give the runs a budget or "
                "a metric that separates them."
            )
        said += [f"{literal(line)}." for line in _at_the_edge(best, space)]
        doc.paragraph("\n".join(said))
        _confirm(doc, ranked, keys, search)
    atomic_write_text(sweep_dir / REPORT, doc.markdown())
    atomic_write_text(sweep_dir / REPORT_PAGE, doc.html())
    return sweep_dir / REPORT


def _figures(doc: Document, sweep_dir: Path, search: dict, ranked: list[dict]) -> None:
    """search_history.png (each scored trial in the order asked, the best so far) and search_slices.png (the
    score against each searched setting, one point per run), where a trial scored; none left from before."""
    metric, lower = search["metric"], search["direction"] == "minimize"
    history = sorted(
        (t["number"], t["value"])
        for t in search["trials"]
        if t.get("state") == DONE_STATE and isinstance(t.get("value"), int | float) and math.isfinite(t["value"])
    )
    paths = {name: sweep_dir / f"search_{name}.png" for name in ("history", "slices")}
    if not history:
        for path in paths.values():
            path.unlink(missing_ok=True)
        return
    search_history(history, metric, lower, paths["history"])
    doc.figure(paths["history"], f"{metric} of each trial in the order asked, and the best so far")
    shown = [t for t in ranked if math.isfinite(t["value"])]
    points = {
        k: [(t["values"][k], t["value"], t["numbers"][0]) for t in shown if k in t["values"]] for k in search["space"]
    }
    search_slices(points, _log_keys(search["space"]), metric, lower, paths["slices"])
    doc.figure(paths["slices"], f"{metric} against each searched setting, one point a run, coloured by its trial")


def _log_keys(space: dict[str, str]) -> set[str]:
    """The keys searched on a log scale (an interval tagged log)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found = set()
    for key, text in space.items():
        override = OverridesParser.create().parse_override(f"{key}={text}")
        if override.is_interval_sweep() and "log" in override.value().tags:
            found.add(key)
    return found


def _distinct(ranked: list[dict]) -> list[dict]:
    """The ranked trials, one per run folder: a trial asked again with the same values (the sampler may, in a
    choice or an int range) is its first one's run, listed with it, not a tie."""
    runs: dict[str, dict] = {}
    for trial in ranked:
        runs.setdefault(trial["run"], {**trial, "numbers": []})["numbers"].append(trial["number"])
    return list(runs.values())


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


def _confirm(doc: Document, ranked: list[dict], keys: list[str], search: dict) -> None:
    """Each trial ran one seed, so a lead smaller than the seeds' scatter is not established: the commands that
    run the first trials again over seeds of their own, with the search's other settings, and ``sweep.py
    tune``, which chooses between them on the metric the search followed (one grid where one key was searched;
    a sweep per trial otherwise, which ``tune`` pools: a grid would cross their values)."""
    first, metric = ranked[:3], search["metric"]
    # the held settings as typed (prefixes and quotes kept), each one argument of the shell
    held = [
        line for line in search.get("held_lines") or [] if line.lstrip("+~").partition("=")[0] not in ("seed", "grid")
    ]
    common = " ".join(shlex.quote(arg) for arg in ["python", "sweep.py", "grid=none", *held, f"report_metric={metric}"])
    if len(keys) == 1:
        values = ",".join(sorted({_shown(t["values"][keys[0]]) for t in first}, key=_order))
        commands = [f"{common} {shlex.quote(f'{keys[0]}={values}')} seed=201,202,203 sweep_name=<name>"]
        folders = "sweeps/<name>"
    else:
        commands = [
            f"{common} {_settings_of(t, keys)} seed=201,202,203 sweep_name=<name>_t{t['number']}" for t in first
        ]
        folders = " ".join(f"sweeps/<name>_t{t['number']}" for t in first)
    doc.paragraph(
        "Each trial is one run at one seed: a lead smaller than the scatter between seeds is not established. "
        f"Before a factorial takes these settings, run the first {len(first)} again over seeds of their own, then "
        f"let `sweep.py tune` choose on {metric} (values as shown here, to 4 digits):"
    )
    doc.code(
        [
            *commands,
            f"python sweep.py tune {folders} --level <the factor they are for, e.g. optim> --metric {metric} "
            "--out conf/tuned/<name>.yaml",
        ]
    )


def _settings_of(trial: dict, keys: list[str]) -> str:
    return " ".join(shlex.quote(f"{k}={_shown(trial['values'][k])}") for k in keys)


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


def print_search_plan(sweep_dir: Path, config: DictConfig, settings: dict, changed: dict) -> None:
    """What the search would do, without training: its space, what it holds, its metric, the trials asked so
    far and the expected cost of the rest."""
    from nmt.sweep.plan import planned_values, recipe_lines, run_time
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
    for line in recipe_lines(config, planned_values(config)):
        print(f"  {line}")
    trials = read_search(sweep_dir).get("trials", [])
    replayed = trials[: settings["n_trials"]]  # asked again first, with their own values; the rest kept
    done = [t for t in replayed if t.get("state") == DONE_STATE]
    again = [t for t in replayed if t.get("state") == ASKED_STATE or t.get("rerun")]
    kept_failed = [t for t in replayed if t.get("state") == FAILED_STATE and not t.get("rerun")]
    left = max(settings["n_trials"] - len(trials), 0)
    print(
        f"  trials asked before: {len(trials)} ({sum(t.get('state') == DONE_STATE for t in trials)} done, "
        f"{sum(t.get('state') == FAILED_STATE for t in trials)} failed): a rerun asks the first "
        f"{len(replayed)} again with their values and reuses their runs ({len(done)} scored, {len(kept_failed)} "
        f"failed with a record kept); trials to run: {left} new"
        + (f", and {len(again)} again (failed or not run)" if again else "")
    )
    left += len(again)
    walls = [run_cost_s(r) for t in done if (r := _record(sweep_dir / t["run"]))]
    if changed:
        print("  expected cost: none: the search would stop first (below)")
    elif walls and left:
        print(
            f"  expected cost: about {run_time(walls, left)} of run time (the mean of its {len(walls)} finished runs)"
        )
    else:
        print("  expected cost: " + ("nothing left to run" if not left else "unknown until a trial has finished"))
    for name, found in changed.items():
        print(f"  under other settings: {name}: {'; '.join(found[:4])}")
