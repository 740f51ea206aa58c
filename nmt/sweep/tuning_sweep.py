"""One tuning sweep read for ``python sweep.py tune`` (nmt/sweep/tuning.py): the level it holds and its
finished runs, each with the metric to choose by, or a one-line refusal that says what to do: a folder that
is not a sweep, a level it does not hold or sweeps (a factorial), runs of an earlier plan in the folder,
planned runs not finished (each one's state named: training now, trained, stopped, failed, not started), a
metric its runs do not record or recorded as nan, scores of another measure, candidates of a setting that is
not the level's own; and which of the settings it held are the level's own (``own_held``, ``own_setting``)."""

import difflib
import math
import os
import re
import socket
import time
from pathlib import Path

from omegaconf import OmegaConf

from nmt.sweep.analysis import check_same_measure
from nmt.sweep.child import process_identity
from nmt.sweep.levels import sweep_levels
from nmt.sweep.records import collect_records, finished_runs
from nmt.sweep.summary import failed_runs, planned, plural
from nmt.training.run_folder import LOCK, finished_results, resumable, trained_results
from nmt.utils.configs import CONF

SAME_CASE_ON_VALIDATION = (
    "rank them by --metric best_val_bleu_tok_lc or val_as_test_bleu_tok_lc (validation, lowercased for every "
    "run), or tune each kind of run in a sweep of its own"
)


# why a finished run may lack a validation metric, by the metric's first word
_WITHOUT = {
    "best": "without decoded validations (validation.bleu_every_n_epochs=0)",
    "final": "without a decoded validation of the final weights (validation.bleu_every_n_epochs=0, or an interval "
    "whose last validation did not decode, with checkpoint.monitor=val_loss)",
    "val": "without the final decode of the validation set (val_after_training=false)",
}


# keys a tuning sweep holds that are not the level it tunes
NOT_LEVELS = ("experiment", "data", "grid", "seed", "sweep_name", "threads", "plan")


TUNING_METRIC = "best_val_bleu"  # validation, never test: tuned settings are chosen where the test is not seen


def candidate_of(name: str) -> str:
    """A tuning run's folder name without its seed: the candidate it is a seed of."""
    return ",".join(part for part in name.split(",") if not part.startswith("seed="))


def _unrun_candidates(sweep_dir: Path) -> list[str]:
    """The planned candidates of a tuning sweep (its runs' folder names, the seed aside) with no finished run."""
    done = {candidate_of(path.parent.name) for path in finished_runs(sweep_dir)[0]}
    return sorted({candidate_of(name) for name in planned(sweep_dir).get("run_names") or []} - done)


def _unrun_seeds(sweep_dir: Path) -> list[str]:
    """The planned runs of a tuning sweep that neither finished nor failed: not run yet (a sweep stopped by
    start_runs_for, or still under way). A failed run is said by the note on unequal seeds."""
    done = {path.parent.name for path in finished_runs(sweep_dir)[0]} | set(failed_runs(sweep_dir))
    return [name for name in planned(sweep_dir).get("run_names") or [] if name not in done]


def _run_state(run_dir: Path, failed: set[str]) -> str:
    """What became of a planned run that has not finished: failed (``failed``: the names of such runs),
    training now (its folder's lock names a process that holds it), trained with its final scores stopped,
    stopped with a state to resume, or not started."""
    if run_dir.name in failed:
        return "failed (its folder says why)"
    holder = _lock_holder(run_dir)
    if holder:
        return holder
    if finished_results(run_dir):  # killed as it ended: its record of the sweep not written
        return "finished, not recorded by the sweep (its command again records it, training nothing)"
    if trained_results(run_dir):
        return "trained, its final scores not made"
    if resumable(run_dir):
        return "stopped, resumable"
    return "not started" if not run_dir.is_dir() else "not finished"


def _lock_holder(run_dir: Path) -> str:
    """The process training in a run folder, as its lock file names it (``pid N on HOST, since T``; the file
    stays after its run, so the text alone proves nothing): "training now" where that process runs on this
    machine and started before the lock was taken (a later process given the same id is not it), "training on
    HOST ..." for another machine's, whose processes cannot be seen from here; else ''. Read, never locked: a
    probe holding the lock for an instant would make a run starting then refuse its folder."""
    lock = run_dir / LOCK
    text = lock.read_text(errors="replace") if lock.is_file() else ""
    named = re.match(r"pid (\d+) on (\S+), since (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", text)
    if not named:
        return ""
    pid, host, since = int(named[1]), named[2], time.mktime(time.strptime(named[3], "%Y-%m-%d %H:%M:%S"))
    if host != socket.gethostname():
        return f"training on {host} (pid {pid}), if that process still runs there"
    identity = process_identity(pid)
    if identity is None:
        return ""
    started = _started(identity)
    return "" if started is not None and started > since + 1 else "training now"


def _started(identity: str) -> float | None:
    """When a live process began, in seconds since the epoch, from its identity (``host pid ticks-since-boot``,
    nmt/sweep/child.py); None where the machine does not say (no /proc)."""
    ticks = identity.split()[-1]
    try:
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
    except (OSError, StopIteration):
        return None
    return boot + int(ticks) / os.sysconf("SC_CLK_TCK") if ticks.isdigit() else None


def _unfinished(sweep_dir: Path, names: list[str], what: str) -> str:
    """The refusal of a tuning sweep whose planned runs ``names`` have not finished, each one's state named,
    and what to do: wait for the runs training, and run the sweep's command again for the others."""
    failed = set(failed_runs(sweep_dir))
    states = {name: _run_state(sweep_dir / name, failed) for name in names}
    shown = "; ".join(f"{name}: {state}" for name, state in list(states.items())[:3])
    running = sum(state.startswith("training") for state in states.values())
    again = "the tuning sweep's command again (finished runs are kept, stopped ones resume, a failed one says why)"
    if not running:
        todo = f"finish the tuning sweep with {again}"
    else:
        todo = f"wait for the {plural(running, 'run')} training to end"
        todo += f", and finish the others with {again}" if running < len(names) else ""
    return f"{sweep_dir}: {what} ({shown}{' ...' if len(names) > 3 else ''}): {todo}"


def tuning_runs(sweep_dir: Path, level_key: str, metric: str) -> tuple[str, list[dict]]:
    """The level a tuning sweep held, and its finished runs, every one with ``metric`` (or a one-line error)."""
    level = held_level(sweep_dir, level_key)
    finished = collect_records(sweep_dir)
    earlier = finished_runs(sweep_dir)[1]
    if earlier:  # a grid widened in the same folder (past an edge, say): its earlier candidates are not compared
        raise ValueError(
            f"{sweep_dir}: {len(earlier)} finished run(s) of an earlier sweep in this folder ({', '.join(earlier[:3])}"
            f"{' ...' if len(earlier) > 3 else ''}) are not in its last plan, so tune would not use them: run "
            "every candidate and seed in one sweep (its command with all the values: finished runs are kept), or "
            "give each its own sweep_name"
        )
    records = [r for r in finished if r["metrics"].get(metric) is not None]
    if not finished:
        raise ValueError(f"{sweep_dir}: no finished run; finish the tuning sweep first")
    unrun = _unrun_candidates(sweep_dir)
    if unrun:  # a choice among the candidates that finished is not the tuning planned
        runs = [n for n in planned(sweep_dir).get("run_names") or [] if candidate_of(n) in unrun]
        what = (
            f"{len(unrun)} planned candidate(s) have no finished run ({'; '.join(unrun[:3])}{' ...' * (len(unrun) > 3)}"
        )
        what += "), so tune would choose among the others; their runs"
        raise ValueError(_unfinished(sweep_dir, runs, what))
    unrun = _unrun_seeds(sweep_dir)
    if unrun:  # seeds first is the order a sweep runs them in: a cut sweep left every candidate fewer seeds
        what = f"{len(unrun)} planned run(s) have not finished, so tune would choose on fewer seeds than planned"
        raise ValueError(_unfinished(sweep_dir, unrun, what))
    if not records:  # a misspelt or unrecorded metric: name those the runs record
        recorded = sorted({name for r in finished for name, value in r["metrics"].items() if value is not None})
        usable = [name for name in recorded if not name.startswith("test_")]  # tune chooses on validation data
        close = difflib.get_close_matches(metric, usable, n=1)
        hint = f" (did you mean --metric {close[0]}?)" if close else ""
        raise ValueError(
            f"{sweep_dir}: no run records {metric}{hint}; tune chooses by one of the validation scores its runs "
            f"record: {', '.join(usable) or 'none (they record test scores alone)'}"
        )
    if len(records) < len(finished):  # never a choice among some of the candidates without saying so
        missing = sorted(Path(r.get("run_dir", "?")).name for r in finished if r["metrics"].get(metric) is None)
        why = _WITHOUT.get(metric.split("_")[0], _WITHOUT["best"])
        raise ValueError(
            f"{sweep_dir}: {len(missing)} of {len(finished)} finished runs have no {metric} "
            f"({', '.join(missing)}): made by an earlier version or {why}; run them again (on_changed=move) "
            "or choose another --metric"
        )
    unscored = sorted(
        Path(r.get("run_dir", "?")).name for r in records if not math.isfinite(float(r["metrics"][metric]))
    )
    if unscored:  # no mean or interval takes nan or inf: a candidate that diverged is told apart by a score
        instead = (
            f"choose by a score it still has (--metric {TUNING_METRIC}, the default: a diverged candidate scores "
            "low), or leave such candidates out of the sweep"
            if metric != TUNING_METRIC
            else "leave such candidates out of the sweep (a smaller rate, a longer warm-up), or run them again"
        )
        raise ValueError(
            f"{sweep_dir}: {len(unscored)} run(s) recorded {metric} as nan or infinite ({', '.join(unscored[:3])}"
            f"{' ...' if len(unscored) > 3 else ''}): a run that diverged; {instead}"
        )
    # a test measure is no way out here: settings are chosen on validation data
    check_same_measure(records, metric, SAME_CASE_ON_VALIDATION)
    return level, records


def held_level(sweep_dir: Path, key: str) -> str:
    """The value a tuning sweep held ``key`` at (one value, on its command line or in its grid)."""
    saved = sweep_dir / "multirun.yaml"
    if not saved.is_file():
        if planned(sweep_dir).get("search"):  # one seed a trial: its first trials are compared over seeds first
            raise ValueError(
                f"{sweep_dir}: a search, each trial one seed; tune chooses between settings run over seeds: the end "
                f"of its search.md gives the sweeps that run its first trials again over seeds, then this command"
            )
        found = "no such folder" if not Path(sweep_dir).exists() else "not a sweep folder (no multirun.yaml)"
        raise ValueError(f"{sweep_dir}: {found}; give a finished tuning sweep's folder (sweeps/<sweep_name>)")
    levels = sweep_levels(OmegaConf.load(saved))
    values = levels.get(key)
    if not values and "=" in key and key.split("=", 1)[0] in levels:  # the level given with its value
        raise ValueError(f"--level {key}: --level takes the key alone (--level {key.split('=', 1)[0]}); the level "
                         "is read from the tuning sweep")  # fmt: skip
    if not values:
        # the keys it holds at one value that could be a level: not the recipe, corpus or the sweep's own keys
        held = [k for k, v in levels.items() if len(v) == 1 and k not in NOT_LEVELS and not k.startswith("hydra")]
        close = difflib.get_close_matches(key, held, n=1)
        hint = f" (did you mean --level {close[0]}?)" if close else ""
        raise ValueError(
            f"{sweep_dir}: --level {key}: this tuning sweep does not set {key} on its command line or grid{hint}; "
            "--level names the factor it holds at the level being tuned, one of: "
            f"{', '.join(f'{k} (held at {levels[k][0]})' for k in held) or 'none given'}"
        )
    if len(values) != 1:
        raise ValueError(
            f"{sweep_dir}: a tuning sweep holds {key} at one level; this one sweeps it over {values} (a factorial?): "
            f"give one tuning sweep per level, {key}=<level> with its candidate settings swept"
        )
    return values[0]


def only_own_swept(sweep_dir: Path, level_key: str, level: str, scored: list) -> None:
    """A tuning sweep sweeps the level's own settings alone: the choice of another key (pos for --level optim)
    would go into the factorial as the level's setting, and its runs of this level alone would have it."""
    others = sorted({k for setting, _ in scored for k, _ in setting if not own_setting(level_key, level, k)})
    if others:
        raise ValueError(
            f"{sweep_dir}: it sweeps {', '.join(others)}, not a setting of {level_key}={level} (those are "
            f"{level_key}.* and the keys its config file reads): its choice would go into the factorial with "
            f"{level_key}={level} alone, mixing the two factors; tune only the level's own settings, or make "
            f"{', '.join(others)} a factor of the factorial"
        )


def own_held(sweep_dir: Path, level_key: str, level: str) -> list[str]:
    """The overrides a tuning sweep held at one value (its command line, then its grid's) that are settings of
    the level itself, as written (``+key=value``, ``~key``)."""
    saved = OmegaConf.load(sweep_dir / "multirun.yaml")
    levels = sweep_levels(saved)
    given = list(saved.hydra.overrides.task)
    keys = {o.lstrip("+~").partition("=")[0] for o in given}
    params = saved.hydra.sweeper.get("params") or {}
    held = given + [f"{k}={v}" for k, v in params.items() if k not in keys]  # the command line's key wins
    own = []
    for override in held:
        key = override.lstrip("+~").partition("=")[0]
        if key != level_key and len(levels.get(key) or []) == 1 and own_setting(level_key, level, key):
            own.append(override)
    return own


def own_setting(level_key: str, level: str, key: str) -> bool:
    """Whether ``key`` is a setting of the level itself: under its group (``optim.scheduler.factor``), or a
    top-level key that the level's config file reads (noam's ``${warmup}``)."""
    if key.startswith(level_key + "."):
        return True
    option = CONF / level_key / f"{level}.yaml"
    return option.is_file() and "${" + key + "}" in option.read_text()
