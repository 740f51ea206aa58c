"""The loop of ``hydra/sweeper=search`` (conf/hydra/sweeper/search.yaml; its class, which Hydra loads, is in
hydra_plugins/nmt_search_sweeper/): the hydra-optuna-sweeper plugin's sweeper, configured as the plugin is,
asking Optuna for trials and telling it each one's validation score. It differs where a sweep of this
project must: a trial whose run failed (diverged, refused) is recorded as failed and the search goes
on, where the plugin stops the whole search at it; the held settings reach each run as the command line
typed them; no trial starts once ``start_runs_for`` has passed; and every trial asked and told is written to
the sweep's folder as it happens (nmt/sweep/search.py), then its report.

A rerun asks the same trials again (the sampler is seeded and told the same scores), and each finished run is
reused, not trained again: a killed search resumes where it stopped, and a rerun with more ``n_trials`` goes on.
"""

import json
import logging
import re
import time
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

from nmt.sweep.levels import hydra_quoted, override_pairs
from nmt.sweep.plan import run_name
from nmt.sweep.progress import LAUNCHED, too_late_to_start
from nmt.sweep.search import (
    ASKED_STATE,
    DONE_STATE,
    FAILED_STATE,
    ranked_trials,
    read_search,
    trial_value,
    write_search,
)
from nmt.sweep.search_report import write_search_report
from nmt.sweep.summary import FAILED, planned


def run_search(impl, arguments: list[str]) -> None:
    """The search's trials, asked, launched and told in batches of ``n_jobs``; ``impl``: the plugin's own
    sweeper, set up by Hydra (its launcher, seeded sampler, params and trial counts)."""
    logging.getLogger("alembic").setLevel(logging.WARNING)  # imported by optuna: a line for each of its plugins
    import optuna

    config = impl.config
    sweep_dir = Path(config.hydra.sweep.dir)
    settings = planned(sweep_dir).get("search")
    if not settings:  # written by the sweep's start (nmt/sweep/callback.py), which checked the search first
        raise RuntimeError(f"{sweep_dir}: no search settings in its plan; run a search through sweep.py")
    impl._process_searchspace_config()  # a deprecated search_space block becomes params, as the plugin does
    typed = [*impl._parse_sweeper_params_config(), *arguments]
    space, _ = create_params_from_overrides(typed)
    # a key held later is held; the rest in one order, as the sampler draws them in the order suggested
    space = {k: space[k] for k in sorted(space) if k in settings["space"]}
    held = {}  # each held key's override as typed (the command line's replaces the params')
    for override in OverridesParser.create().parse_overrides(typed):
        if override.key_or_group not in space:
            held[override.key_or_group] = override.input_line
    swept = set(space) | {"seed"}
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep prints each trial itself
    study = optuna.create_study(study_name=impl.study_name, sampler=impl.sampler, direction=settings["direction"])
    # A rerun asks its trials as the first sitting did: the seeded sampler draws the same values as long as
    # it has been told the same scores at the same points. So each scored trial's record says after how many
    # trials asked it was told (told_at), and a rerun tells it there again. A trial that failed or did not run
    # is told nothing (TPE, CMA-ES and random sampling draw alike whether such a trial failed or is running);
    # one that scores now for the first time is told once the rerun has asked every recorded trial, and
    # recorded so. A trial asked with other values than the record's (a record edited by hand, another Optuna)
    # ends the replay: the record's trials from it on are set aside, and new ones asked.
    recorded = read_search(sweep_dir).get("trials", [])
    waiting: list[tuple] = []  # scored trials, each to be told once as many trials as its told_at were asked
    trials: list[dict] = []
    while len(trials) < impl.n_trials:
        if too_late_to_start(sweep_dir, config.get("start_runs_for")):
            print(f"[search] start_runs_for={config.start_runs_for} has passed: no more trials; rerun to go on")
            break
        batch = [
            _asked(study.ask(), space, held, swept, config)
            for _ in range(min(impl.n_jobs, impl.n_trials - len(trials)))
        ]
        for _, entry in batch:
            before = recorded[entry["number"]] if entry["number"] < len(recorded) else None
            same = before is not None and json.dumps(before["values"], sort_keys=True) == json.dumps(
                entry["values"], sort_keys=True
            )  # strictly: 1, 1.0 and True are one key of a dict, not one value of a choice
            if before is not None and not same:
                aside = sweep_dir / f"search_aside_{entry['number']}_{time.strftime('%Y%m%d-%H%M%S')}.json"
                write_search(aside.parent, {}, recorded[entry["number"] :], aside.name)
                print(
                    f"[search] trial {entry['number']} was asked with other values than the record's ({before['run']}):"
                    f" the record's trials from it on are set aside in {aside.name} (their runs stay); new ones follow"
                )
                recorded = recorded[: entry["number"]]
        trials += [entry for _, entry in batch]
        write_search(sweep_dir, settings, trials + recorded[len(trials) :])
        # one job per run folder: the sampler may ask the same values twice (a choice, an int range), and two
        # jobs of one folder would race for it
        runs = list(dict.fromkeys(entry["run"] for _, entry in batch))
        first = {run: next(e for _, e in batch if e["run"] == run) for run in runs}
        returns = impl.launcher.launch([tuple(first[run]["overrides"]) for run in runs], initial_job_idx=impl.job_idx)
        impl.job_idx += len(returns)
        outcome = dict(zip(runs, returns, strict=True))
        for trial, entry in batch:
            _settle(entry, outcome[entry["run"]], sweep_dir, settings["metric"])
            before = recorded[entry["number"]] if entry["number"] < len(recorded) else {}
            if before.get("state") == DONE_STATE and entry["state"] != DONE_STATE:
                # scored then, not now (its run removed, then failed or taken by another process): the sampler
                # drew the trials after it knowing that score, so the record's score stands
                print(f"[search] trial {entry['number']}: its run did not score now; its recorded score stands")
                entry.update({k: before[k] for k in ("state", "value", "told_at") if k in before})
                entry.pop("error", None), entry.pop("rerun", None)
            if entry["state"] != DONE_STATE:
                continue
            entry["told_at"] = _told_at(before, impl.n_jobs) or max(len(trials), len(recorded))
            waiting.append((trial, entry))
            best = ranked_trials({**settings, "trials": trials})[0]
            print(
                f"[search] trial {trial.number}: {settings['metric']} {entry['value']:.4g}; best so far: trial "
                f"{best['number']} ({best['value']:.4g})",
                flush=True,
            )
        for trial, entry in [w for w in waiting if w[1]["told_at"] <= len(trials)]:
            study.tell(trial, entry["value"])
            waiting.remove((trial, entry))
        write_search(sweep_dir, settings, trials + recorded[len(trials) :])
    if trials:
        print(f"[search] report: {write_search_report(sweep_dir)}")


def _asked(trial, space: dict, held: dict[str, str], swept: set[str], config) -> tuple:
    """A trial asked of the study, its values suggested (a replayed one's are its own), with its record entry:
    the run's folder and the overrides it is launched with, the held ones as the command line typed them."""
    for name, distribution in space.items():
        trial._suggest(name, distribution)  # as the plugin suggests them (Optuna 2's one way for all)
    overrides = [*held.values(), *(f"{k}={_as_value(v)}" for k, v in trial.params.items())]
    values = dict(trial.params)
    values["seed"] = dict(override_pairs(overrides)).get("seed", str(config.get("seed")))
    entry = {
        "number": trial.number,
        "run": run_name(dict(override_pairs(overrides)), swept),
        "values": values,
        "overrides": overrides,
        "state": ASKED_STATE,
    }
    print(f"[search] trial {trial.number}: {' '.join(f'{k}={v}' for k, v in trial.params.items())}")
    return trial, entry


def _as_value(value) -> str:
    """A sampled value as Hydra reads it back: a choice's string quoted where Hydra's grammar would read it
    otherwise (a comma, a space, an interpolation), None as null, booleans as Hydra writes them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and not re.fullmatch(r"[\w.+\-/]+", value):
        return hydra_quoted(value)
    return str(value)


def _settle(entry: dict, ret, sweep_dir: Path, metric: str) -> None:
    """The trial's entry given its run's outcome: its score; failed, where its run failed in this sitting or
    recorded no score (a diverged run's nan); or left asked, where its run did not run here (trained by another
    process, or not started): the sampler is then told nothing false, and a rerun runs it."""
    try:
        record = ret.return_value  # raises what the trial's job raised
        error = None
    except Exception as err:  # noqa: BLE001 - one trial's failure is its own, recorded as failed
        record, error = None, str(err).splitlines()[0] if str(err) else repr(err)
    value = trial_value(record, metric)
    if value is not None:
        entry.update(state=DONE_STATE, value=value)
        return
    failed = sweep_dir / entry["run"] / FAILED
    launched = sweep_dir / LAUNCHED
    # a failure of an earlier sitting stays in a folder this sitting did not run (another process held it)
    failed_now = failed.is_file() and (not launched.is_file() or failed.stat().st_mtime >= launched.stat().st_mtime)
    if error is None and record is None and not failed_now:
        print(f"[search] trial {entry['number']}: not run here (trained by another process, or not started)")
        return
    # a run without a record runs again on a rerun; one whose record holds no score is reused, and fails again
    entry.update(state=FAILED_STATE, error=error or _why_unscored(failed, record), rerun=record is None)
    print(f"[search] trial {entry['number']} failed: {entry['error']}")


def _told_at(entry: dict, n_jobs: int) -> int | None:
    """After how many trials asked the record's scored trial was told: as recorded, or, for a record written
    before it said so, at the end of its batch."""
    if entry.get("state") != DONE_STATE:
        return None
    return entry.get("told_at") or (entry["number"] // n_jobs + 1) * n_jobs


def _why_unscored(failed: Path, record: dict | None) -> str:
    """Why a trial has no score: its run's failure as the sweep recorded it, or the metric it lacks (a record
    kept: a rerun reuses it, and the trial fails again)."""
    import json

    if failed.is_file():
        try:
            return str(json.loads(failed.read_text()).get("error") or "failed")
        except (OSError, ValueError):
            return "failed"
    return "its run recorded no finite value of the metric (a diverged run's nan, say)"
