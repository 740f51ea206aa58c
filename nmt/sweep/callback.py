"""The sweep's Hydra callback (``conf/sweep.yaml``'s ``hydra.callbacks.report``): before any run starts it
checks the sweep's inputs and plan, prints the plan, and starts what the runs share (an MPS daemon, the GPU
pool); after the last run it collects the records and writes the report, or stands a search's trials.
Each run itself is :func:`nmt.sweep.runner.run_cell`, a separate ``train.py`` process.
"""

import json
import shutil
import sys
import time
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt.sweep.child import (
    ON_SWEEP_SIGNAL,
    handle_sweep_signals,
    mark_sweep_process,
    restore_signals,
)
from nmt.sweep.gpus import finish_mps, start_mps
from nmt.sweep.inputs import RunConfigs, input_problem, logs_to_wandb, metric_problem
from nmt.sweep.levels import (
    is_search,
    plain_settings,
    sweep_levels,
)
from nmt.sweep.mps import machine_wide_daemon
from nmt.sweep.plan import (
    SEARCHPATH,
    changed_runs,
    own_folder,
    planned_runs,
    planned_values,
    print_plan,
    run_config_problem,
    run_name,
    wandb_group,
)
from nmt.sweep.progress import (
    LAUNCHED,
    parse_duration,
    runs_started_this_sitting,
)
from nmt.sweep.records import collect_records
from nmt.sweep.report import set_aside, write_report
from nmt.sweep.runner import SUPERSEDED, leave_on_signal
from nmt.sweep.search import (
    DONE_STATE,
    FAILED_STATE,
    other_search,
    read_search,
    search_metric,
    search_problem,
    search_settings,
    trial_runs,
)
from nmt.sweep.search_report import print_search_plan
from nmt.sweep.summary import PLAN, failed_runs
from nmt.sweep.tuned import checked_tuned_file
from nmt.training.run_folder import RunFolderError, RunLock
from nmt.utils.configs import unset_variable_message
from nmt.utils.io import atomic_write_json, atomic_write_text

# the MPS daemon and its watch of each sweep this process launched (gpu_mps): kept out of the callback,
# which the joblib launcher sends to its workers and which therefore holds nothing a thread owns
_MPS: dict = {}
_SIGNALS: dict = {}  # per sweep folder: the signal handlers its launch replaced (child.handle_sweep_signals)
_LOCKS: dict = {}  # per search folder: the lock its sitting holds (one sitting of a search at a time)


class SweepReport(Callback):
    """Hydra callback: when every job of the multirun has ended, write the report."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # Hydra turns an exception in a callback into a warning and launches every run anyway (plan=true too):
        # any failure here stops the sweep, in one line
        try:
            self._start(config)
        except SystemExit:
            raise
        except Exception as err:  # noqa: BLE001
            said = unset_variable_message(err, config) or (str(err).splitlines()[0] if str(err) else repr(err))
            try:
                print(f"error: the sweep did not start: {said}", file=sys.stderr)
            except OSError:  # stderr closed too (`... 2>&1 | head`): the sweep still must not launch
                pass
            SEARCHPATH.clear()
            raise SystemExit(2) from None

    def _start(self, config: DictConfig) -> None:
        SEARCHPATH[:] = list(OmegaConf.select(config, "hydra.searchpath", default=None) or [])
        if config.get("start_runs_for") is not None:
            parse_duration(config.start_runs_for)  # a bad value fails before any run starts
        sweep_dir = Path(config.hydra.sweep.dir)
        problem = input_problem(config) or run_config_problem(config)
        if problem:  # SystemExit: Hydra turns an exception in a callback into a warning and goes on
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(2)
        if is_search(config):
            self._start_search(config, sweep_dir)
            return
        levels = sweep_levels(config)
        factors = sorted(k for k, v in levels.items() if len(v) > 1)
        _check_same_design(config, sweep_dir, levels, factors)
        tuned = checked_tuned_file(config, factors)  # +tuned=<name>: compared with its tuning, said
        if config.get("plan"):
            print_plan(sweep_dir, config)
            raise SystemExit(0)  # a plan trains nothing
        _settle_changed_runs(config, sweep_dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self._take_over(sweep_dir)
        _write_plan(config, sweep_dir, levels, factors, tuned)
        self._launching(config, sweep_dir)

    def _start_search(self, config: DictConfig, sweep_dir: Path) -> None:
        """The start of a search (hydra/sweeper=search): its own checks, plan and record of what it holds; its
        trials are asked by nmt/sweep/search_sweeper.py as the runs before them end."""
        runs = RunConfigs()
        runs.read(config, sweep_levels(config))  # checked by input_problem: here for what the runs rank by
        try:
            metric = search_metric(config, next(iter(runs.ranked_by)) if len(runs.ranked_by) == 1 else None)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        # a metric the runs do not record, or a final score they do not make: trained for nothing otherwise
        problem = search_problem(config, metric) or metric_problem(config, runs, metric)
        settings = search_settings(config, metric)
        plan_path = sweep_dir / PLAN
        before = json.loads(plan_path.read_text()) if plan_path.is_file() else None
        if not problem and before is not None:
            differs = other_search(before["search"], settings) if "search" in before else "it is a grid sweep"
            if differs:  # a rerun asks the same trials only as the same search: its earlier record would be lost
                problem = (
                    f"{sweep_dir} holds another search: {differs}. Give this one its own {own_folder(config)}, or "
                    "remove that folder"
                )
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(2)
        trials = trial_runs(sweep_dir, config)
        changed = changed_runs(sweep_dir, config, trials) if trials else {}
        if config.get("plan"):
            print_search_plan(sweep_dir, config, settings, changed)
            raise SystemExit(0)
        if changed:
            listing = "; ".join(f"{name} ({', '.join(found[:3])})" for name, found in list(changed.items())[:3])
            print(
                f"error: {len(changed)} trial run(s) of {sweep_dir} were made under other settings or code: {listing}. "
                f"A rerun asks the same trials, so give this search its own {own_folder(config)}, or remove them "
                "(on_changed=move is a grid's: a search's trials are asked again, not run afresh)",
                file=sys.stderr,
            )
            raise SystemExit(2)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock(sweep_dir)
        try:  # a second sitting would ask the same trials and write over this one's record
            _LOCKS[str(sweep_dir)] = lock.__enter__()  # held until the search ends (on_multirun_end)
        except RunFolderError:
            print(
                f"error: another process runs the search in {sweep_dir}; wait for it to end (a rerun then goes on "
                f"where it stopped), or give this search its own {own_folder(config)}",
                file=sys.stderr,
            )
            raise SystemExit(2) from None
        self._take_over(sweep_dir)
        plan = {
            "factors": {k: [v] for k, v in settings["space"].items()},
            "runs": settings["n_trials"],
            "search": settings,
        }
        atomic_write_json(plan_path, plan)
        space = " ".join(f"{k}={v}" for k, v in settings["space"].items())
        print(f"[search] {settings['n_trials']} trials of {space}, following {metric}", flush=True)
        self._launching(config, sweep_dir)

    @staticmethod
    def _take_over(sweep_dir: Path) -> None:
        """The sweep's process marked as such and its signals handled (children saved, the sweep stopped)."""
        mark_sweep_process()  # before the launcher starts its workers, which inherit it
        _SIGNALS[str(sweep_dir)] = handle_sweep_signals()

    @staticmethod
    def _launching(config: DictConfig, sweep_dir: Path) -> None:
        """As the launcher starts: the time window of start_runs_for begins; gpu_mps: the daemon started."""
        atomic_write_text(sweep_dir / LAUNCHED, f"{time.time():.3f}\n")  # a rerun gets a fresh time window
        if config.get("gpu_mps"):
            _MPS[str(sweep_dir)] = mps = start_mps(sweep_dir)
            # a signal ends the sweep process without its exit handlers: it leaves the daemon first (the
            # daemon shuts down once the runs, its clients, have saved and ended)
            ON_SWEEP_SIGNAL.append(lambda: leave_on_signal(mps[0]))
        elif config.get("gpu_pool") and machine_wide_daemon():
            print("[sweep] note: an MPS daemon answers at /tmp/nvidia-mps: these runs run under it (gpu_mps=false)")

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        try:
            self._end(config)
        finally:  # the next sweep of this process (a test, a library's caller) starts from its own folders
            SEARCHPATH.clear()

    def _end(self, config: DictConfig) -> None:
        """The runs have ended: the signals and MPS given back, then the report (or the search's end)."""
        restore_signals(_SIGNALS.pop(str(Path(config.hydra.sweep.dir)), {}))
        mps = _MPS.pop(str(Path(config.hydra.sweep.dir)), None)
        if mps is not None:
            finish_mps(*mps, Path(config.hydra.sweep.dir), runs_started_this_sitting(Path(config.hydra.sweep.dir)))
        failed = failed_runs(config.hydra.sweep.dir)
        if is_search(config):  # its report was written by its sweeper, which read each trial's score
            lock = _LOCKS.pop(str(Path(config.hydra.sweep.dir)), None)
            if lock is not None:
                lock.__exit__(None, None, None)
            trials = read_search(Path(config.hydra.sweep.dir)).get("trials", [])
            failed = [t for t in trials if t.get("state") == FAILED_STATE]
            if trials and not any(t.get("state") == DONE_STATE for t in trials):
                if not failed:  # asked, not run here (another process held their folders, or start_runs_for)
                    print(f"[search] no trial of {config.hydra.sweep.dir} ran in this sitting: rerun it to go on")
                    return
                # no trial scored: a failure of every run, not a trial's outcome
                print(
                    f"error: no trial of {config.hydra.sweep.dir} was scored, {len(failed)} failed (search.md lists "
                    "their errors)",
                    file=sys.stderr,
                )
                raise SystemExit(1)
            if trials and logs_to_wandb(config):
                from nmt.sweep.dashboard import log_search_to_wandb

                log_search_to_wandb(
                    config.hydra.sweep.dir,
                    project=config.logger.get("project", "nmt"),
                    group=wandb_group(config.sweep_name, config.hydra.sweep.dir, config.hydra.overrides.task),
                )
            if failed:  # a trial's outcome (a diverged rate, say), told to the sampler: the search stands
                print(f"[search] {len(failed)} trial(s) failed: search.md lists them with their errors")
            # SIGKILL or SIGTERM (a crash by another signal, SIGSEGV, is the trial's own, and would recur)
            killed = [
                t for t in failed if str(t.get("error", "")).startswith(("killed by signal 9;", "killed by signal 15;"))
            ]
            if killed:  # not an outcome of its settings (the kernel's OOM killer, a scheduler): a script must know
                print(
                    f"error: {len(killed)} trial(s) of {config.hydra.sweep.dir} were killed (trial "
                    f"{', '.join(str(t['number']) for t in killed[:5])}): rerun the search to run them again",
                    file=sys.stderr,
                )
                raise SystemExit(1)
            return
        if not collect_records(Path(config.hydra.sweep.dir)):
            resume = "" if failed else "; rerun the sweep to resume"
            print(f"[sweep] no finished runs in {config.hydra.sweep.dir}: no report yet{resume}")
            _stop_if_failed(failed)
            return
        baseline = dict(config.baseline) if config.get("baseline") else None
        try:
            report = write_report(
                config.hydra.sweep.dir, config.get("report_metric", "auto"), baseline, config.get("report_sentence", 0)
            )
        except Exception as err:  # noqa: BLE001 - any failure of the report is the sweep's failure
            # raised as SystemExit: Hydra would turn the exception into a warning and exit 0
            said = (
                str(err) if isinstance(err, ValueError | OSError) else repr(err)
            )  # ours name what to do; others' type
            print(f"error: the report of {config.hydra.sweep.dir} failed: {said}", file=sys.stderr)
            raise SystemExit(1) from None
        if logs_to_wandb(config):
            from nmt.sweep.dashboard import log_report_to_wandb, runs_without_wandb

            without = runs_without_wandb(Path(config.hydra.sweep.dir))
            if without:  # reused, trained under another logger: the group holds the report run alone for them
                print(
                    f"[sweep] note: {len(without)} run(s) were trained without W&B (another logger: {without[0]}"
                    f"{' ...' if len(without) > 1 else ''}), so they are not in the W&B group; only the report run "
                    "logs their scores"
                )
            log_report_to_wandb(
                report,
                project=config.logger.get("project", "nmt"),
                group=wandb_group(config.sweep_name, config.hydra.sweep.dir, config.hydra.overrides.task),
                metric=config.get("report_metric", "auto"),
            )
        _stop_if_failed(failed)


def _check_same_design(config: DictConfig, sweep_dir: Path, levels: dict, factors: list[str]) -> None:
    """A sweep folder holds one design: a grid in a search's folder, or other factors than its plan's, is
    refused (more seeds, or a seed run again, is the same sweep)."""
    plan_path = sweep_dir / PLAN
    if plan_path.is_file() and "search" in json.loads(plan_path.read_text()):
        print(
            f"error: {sweep_dir} holds a search; a grid in its folder would mix its runs with the search's "
            f"trials: give the grid its own {own_folder(config)}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if plan_path.is_file():
        # seeds are not a factor of the design: adding seeds to a one-seed sweep (or running one of them
        # again) is the same sweep, its run folders named by their seed either way
        earlier = json.loads(plan_path.read_text())["factors"]
        before = sorted(k for k in earlier if k != "seed")
        now = [k for k in factors if k != "seed"]
        if before != now:
            # a factor given one value is held, not swept: a candidate added alone (warmup=80) reads as
            # another design; say so, and how to add one
            held = [k for k in before if k not in now and len(levels.get(k) or []) == 1]
            every = [f"{k}={','.join(dict.fromkeys([*map(str, earlier[k]), str(levels[k][0])]))}" for k in held]
            added = (
                f" ({', '.join(f'{k}={levels[k][0]}' for k in held)}: one value, held, not swept; to add it to "
                f"this sweep, give every value, {' '.join(every)}: its finished runs are kept)"
                if held
                else ""
            )
            # raised as SystemExit: Hydra turns an exception in a callback into a warning and goes on
            print(
                f"error: {sweep_dir} holds a sweep of the factors {before}; this one sweeps {now}{added}. "
                f"Give it its own {own_folder(config)}, or remove that folder",
                file=sys.stderr,
            )
            raise SystemExit(2)


def _settle_changed_runs(config: DictConfig, sweep_dir: Path) -> None:
    """Runs of the folder made under other settings or code: set aside with their report, statistics and W&B
    runs (on_changed=move) to be run again, or the sweep refused, naming them."""
    changed = changed_runs(sweep_dir, config) if sweep_dir.is_dir() else {}
    if changed and config.get("on_changed", "stop") == "move":
        aside = sweep_dir / SUPERSEDED / time.strftime("%Y%m%d-%H%M%S")
        aside.mkdir(parents=True, exist_ok=True)
        # first the report of them and their statistics: were the folders moved first and this failed, a
        # rerun would find nothing changed and keep reporting them
        set_aside(sweep_dir, aside, list(changed))
        # their W&B runs (and the moved report's) with them: the group never mixes the old settings' runs in;
        # before the folders move below, whose wandb_id files name the runs
        from nmt.sweep.dashboard import set_aside_wandb  # here: a plan never loads Lightning (its loggers)

        set_aside_wandb(sweep_dir, aside, list(changed), report_moved=(aside / "report.md").is_file())
        # the settings the set-aside runs were swept and reported with (report_metric, baseline), read by
        # `sweep.py report <aside>`; this sweep's launcher writes its own over them next
        for record in ("multirun.yaml", PLAN):
            if (sweep_dir / record).is_file():
                shutil.copy2(sweep_dir / record, aside / record)
        for name, found in changed.items():
            (sweep_dir / name).rename(aside / name)
            print(f"[sweep] {name} was made under other settings ({', '.join(found[:3])}): moved to {aside / name}")
        changed = {}
    if changed:
        listing = "; ".join(f"{name} ({', '.join(found[:3])})" for name, found in list(changed.items())[:3])
        listing += f"; and {len(changed) - 3} more (plan=true lists them)" if len(changed) > 3 else ""
        print(
            f"error: {len(changed)} run(s) of {sweep_dir} were made under other settings or code: {listing}. "
            f"Give this sweep its own {own_folder(config)} to keep both, on_changed=move to set those runs aside "
            f"(in {sweep_dir / SUPERSEDED}) and run them again, or remove them",
            file=sys.stderr,
        )
        raise SystemExit(2)


def _write_plan(config: DictConfig, sweep_dir: Path, levels: dict, factors: list[str], tuned) -> None:
    """The plan the report and reruns read (factors, runs, run folders' names, level settings, tuning), and
    the start line."""
    plan_path = sweep_dir / PLAN
    settings = plain_settings(config.get("level_settings"))
    swept = set(factors) | {"seed"}  # as run_cell names the folders
    names = [run_name(values, swept) for values in planned_values(config)]
    plan = {"factors": {k: levels[k] for k in factors}, "runs": planned_runs(config), "run_names": names}
    if settings:
        plan["level_settings"] = settings
    if tuned:
        plan["tuned"] = tuned
    atomic_write_json(plan_path, plan)
    crossed = " x ".join(f"{k} {levels[k]}" for k in factors if k != "seed") or "one configuration"
    seeds = f", seeds {', '.join(map(str, levels['seed']))}" if "seed" in factors else ""
    print(f"[sweep] {planned_runs(config)} runs: {crossed}{seeds}", flush=True)


def _stop_if_failed(failed: list[str]) -> None:
    """A sweep with failed runs ends with status 1 (after its report of the runs that finished), naming
    them; each one's error is on its FAILED line above and in its sweep_failed.json."""
    if failed:
        shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        print(
            f"error: {len(failed)} run(s) of the sweep failed ({shown}): fix what their errors say, then rerun the "
            "sweep (its finished runs are kept)",
            file=sys.stderr,
        )
        raise SystemExit(1)
