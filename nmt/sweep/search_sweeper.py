"""The loop of ``hydra/sweeper=search`` (conf/hydra/sweeper/search.yaml; its class, which Hydra loads, is in
hydra_plugins/nmt_search_sweeper/): the hydra-optuna-sweeper plugin's sweeper, configured as the plugin is,
asking Optuna for trials and telling it each one's validation score. It differs where a sweep of this
project must: a trial whose run failed (diverged, refused) is told to Optuna as failed and the search goes
on, where the plugin stops the whole search at it; the held settings reach each run as the command line
typed them; no trial starts once ``start_runs_for`` has passed; and every trial asked and told is written to
the sweep's folder as it happens (nmt/sweep/search.py), then its report.

A rerun asks the same trials again (the sampler is seeded and told the same scores), and each finished run is
reused, not trained again: a killed search resumes where it stopped, and a rerun with more ``n_trials`` goes on.
"""

import logging
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

from nmt.sweep.levels import override_pairs
from nmt.sweep.plan import run_name
from nmt.sweep.progress import too_late_to_start
from nmt.sweep.search import (
    ASKED_STATE,
    DONE_STATE,
    FAILED_STATE,
    ranked_trials,
    read_search,
    trial_value,
    write_search,
    write_search_report,
)
from nmt.sweep.summary import planned


def run_search(impl, arguments: list[str]) -> None:
    """The search's trials, asked, launched and told in batches of ``n_jobs``; ``impl``: the plugin's own
    sweeper, set up by Hydra (its launcher, seeded sampler, params and trial counts)."""
    logging.getLogger("alembic").setLevel(logging.WARNING)  # imported by optuna: a line for each of its plugins
    import optuna

    config = impl.config
    sweep_dir = Path(config.hydra.sweep.dir)
    settings = planned(sweep_dir).get("search")
    if not settings:  # written by the sweep's start (nmt/sweep/runner.py), which checked the search first
        raise RuntimeError(f"{sweep_dir}: no search settings in its plan; run a search through sweep.py")
    impl._process_searchspace_config()  # a deprecated search_space block becomes params, as the plugin does
    typed = [*impl._parse_sweeper_params_config(), *arguments]
    space, _ = create_params_from_overrides(typed)
    space = {k: v for k, v in space.items() if k in settings["space"]}  # a key held later is held
    held = {}  # each held key's override as typed (the command line's replaces the params')
    for override in OverridesParser.create().parse_overrides(typed):
        if override.key_or_group not in space:
            held[override.key_or_group] = override.input_line
    swept = set(space) | {"seed"}
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep prints each trial itself
    study = optuna.create_study(study_name=impl.study_name, sampler=impl.sampler, direction=settings["direction"])
    trials: list[dict] = []
    # the trials a sitting with more n_trials asked beyond this one's: the same search (the start refuses
    # another in its folder), kept in its record
    later = read_search(sweep_dir).get("trials", [])
    while len(trials) < impl.n_trials:
        if too_late_to_start(sweep_dir, config.get("start_runs_for")):
            print(f"[search] start_runs_for={config.start_runs_for} has passed: no more trials; rerun to go on")
            break
        asked = [study.ask() for _ in range(min(impl.n_jobs, impl.n_trials - len(trials)))]
        batch = []
        for trial in asked:
            for name, distribution in space.items():
                trial._suggest(name, distribution)  # as the plugin suggests them (Optuna 2's one way for all)
            overrides = [*held.values(), *(f"{k}={v}" for k, v in trial.params.items())]
            values = {k: v for k, v in trial.params.items()}
            values["seed"] = dict(override_pairs(overrides)).get("seed", str(config.get("seed")))
            entry = {
                "number": trial.number,
                "run": run_name(dict(override_pairs(overrides)), swept),
                "values": values,
                "overrides": overrides,
                "state": ASKED_STATE,
            }
            batch.append((trial, entry))
            trials.append(entry)
            print(f"[search] trial {trial.number}: {' '.join(f'{k}={v}' for k, v in trial.params.items())}")
        write_search(sweep_dir, settings, trials + later[len(trials) :])
        returns = impl.launcher.launch([tuple(e["overrides"]) for _, e in batch], initial_job_idx=impl.job_idx)
        impl.job_idx += len(returns)
        for (trial, entry), ret in zip(batch, returns, strict=True):
            try:
                record = ret.return_value  # raises what the trial's job raised
                error = None
            except Exception as err:  # noqa: BLE001 - one trial's failure is its own, told as failed
                record, error = None, str(err).splitlines()[0] if str(err) else repr(err)
            value = trial_value(record, settings["metric"])
            if value is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                entry.update(state=FAILED_STATE, error=error or _why_unscored(sweep_dir / entry["run"], record))
                print(f"[search] trial {trial.number} failed: {entry['error']}")
            else:
                study.tell(trial, value)
                entry.update(state=DONE_STATE, value=value)
                best = ranked_trials({**settings, "trials": trials})[0]
                print(
                    f"[search] trial {trial.number}: {settings['metric']} {value:.4g}; best so far: trial "
                    f"{best['number']} ({best['value']:.4g})",
                    flush=True,
                )
        write_search(sweep_dir, settings, trials + later[len(trials) :])
    if any(t["state"] != ASKED_STATE for t in trials):
        print(f"[search] report: {write_search_report(sweep_dir)}")


def _why_unscored(run_dir: Path, record: dict | None) -> str:
    """Why a trial has no score: its run's failure as the sweep recorded it, or the metric it lacks."""
    import json

    failed = run_dir / "sweep_failed.json"
    if failed.is_file():
        try:
            return str(json.loads(failed.read_text()).get("error") or "failed")
        except (OSError, ValueError):
            return "failed"
    if record is None:
        return "not run (trained elsewhere, or not started)"
    return "its run recorded no finite value of the metric"
