"""A sweep's training processes: each run is ``train.py`` in a child process, started, watched and stopped
here, so that a run stops (saving ``last.ckpt``, which a rerun of the sweep resumes) whenever the sweep
stops, however it stops.

- With the basic launcher (and joblib's at ``n_jobs=1``) the sweep process runs its runs itself: Ctrl-C or
  SIGTERM reaches it, it passes the run that one signal, waits for it to save, and ends in one line; if it
  dies without a word (SIGKILL), the kernel signals the run (``stop_with_parent``).
- With a parallel launcher (joblib's), the runs belong to its worker processes. A signal to the sweep
  process reached neither them nor their runs, and a Ctrl-C made joblib kill every worker and run at once,
  unsaved. Now the sweep process ends at once on a signal (``handle_sweep_signals``), leaving joblib no
  time to kill anything; each worker, watching the sweep process (``watch_sweep``), stops its run when it
  has gone and then ends itself, so that it starts no further run; a worker signalled itself (Ctrl-C
  reaches the whole terminal group) stops its run the same way.
"""

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from nmt.utils.parent_death import signal_on_parent_death

# the sweep process, in the environment of the processes it starts ("host pid start-time"): a launcher's
# worker on the same machine watches it (watch_sweep)
SWEEP_PROCESS = "NMT_SWEEP_PROCESS"
_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
# what the sweep process must still do when a signal ends it (leave its MPS daemon): atexit does not run
ON_SWEEP_SIGNAL: list[Callable[[], None]] = []
# loky's resource tracker outlives a sweep ended by a signal and warns of its leftovers, in lines that
# would follow the sweep's one line
_QUIET_TRACKER = "ignore::UserWarning:joblib.externals.loky.backend.resource_tracker"
_WARNINGS_BEFORE: list[str | None] = []  # PYTHONWARNINGS before mark_sweep_process, for restore_signals


def stop_with_parent(parent: int) -> None:
    """In a sweep's training child, between fork and exec: the kernel sends it SIGTERM when the thread that
    started it (in process ``parent``: the sweep process, or a launcher's worker) dies, however it dies; the
    child then saves last.ckpt and exits, and a rerun resumes it. A parent gone before this was set: not run.
    Not Linux: a sweep that dies without handling a signal leaves its run training."""
    if not signal_on_parent_death(signal.SIGTERM, parent) and os.getppid() != parent:
        os._exit(143)


def process_identity(pid: int) -> str | None:
    """The "host pid start-time" of a live process (its start in clock ticks since boot, so that a later process
    given the same id is not taken for it); None when it has gone (or is a zombie). Without /proc, the id
    alone ("-" for the start)."""
    if not Path("/proc/self/stat").exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return f"{socket.gethostname()} {pid} -"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return f"{socket.gethostname()} {pid} {fields[19]}"


def mark_sweep_process() -> None:
    """In the sweep process, before the launcher starts its workers (which inherit its environment)."""
    os.environ[SWEEP_PROCESS] = process_identity(os.getpid())
    _WARNINGS_BEFORE.append(os.environ.get("PYTHONWARNINGS"))
    warnings = os.environ.get("PYTHONWARNINGS", "")
    if _QUIET_TRACKER not in warnings:
        os.environ["PYTHONWARNINGS"] = f"{warnings},{_QUIET_TRACKER}" if warnings else _QUIET_TRACKER


def in_a_worker() -> bool:
    """Whether this process runs a sweep's runs for it on the same machine: a parallel launcher's worker, not
    the sweep process itself, nor a job on another machine (a cluster's, which outlives its sweep)."""
    identity = os.environ.get(SWEEP_PROCESS, "").split()
    return len(identity) == 3 and identity[0] == socket.gethostname() and int(identity[1]) != os.getpid()


def sweep_alive() -> bool:
    """Whether the sweep process this worker serves still runs (the same process: its id and its start)."""
    _, pid, start = os.environ[SWEEP_PROCESS].split()
    now = process_identity(int(pid))
    return now is not None and now.split()[1:] == [pid, start]


def end_worker_if_sweep_gone(run_name: str) -> None:
    """In a launcher's worker, before a run: the sweep process has gone (while this worker waited for a GPU,
    or since its last run), so this run does not start, and the worker ends."""
    if in_a_worker() and not sweep_alive():
        end_worker(f"the sweep process has gone: {run_name} not started", 143)


def watch_sweep(process: subprocess.Popen, stopping: threading.Event, every: float = 1.0) -> threading.Event:
    """In a launcher's worker: once the sweep process has gone, stop the run (SIGTERM: it saves its state)
    and set the event returned, on which run_child ends the worker; not once ``stopping`` is set (the worker
    got a signal itself and passed it on: a second one would stop the run before it has saved)."""
    gone = threading.Event()

    def watch() -> None:
        while process.poll() is None and not stopping.is_set():
            if not sweep_alive():
                gone.set()
                process.send_signal(signal.SIGTERM)
                return
            time.sleep(every)

    threading.Thread(target=watch, name="watch-sweep", daemon=True).start()
    return gone


def end_worker(message: str, code: int) -> None:
    """End a launcher's worker at once, saying why: not by SystemExit, which the launcher's worker catches
    before taking the next run."""
    sys.stdout.flush()
    print(f"[sweep] {message}; run the same command again to resume the sweep (finished runs are kept)",
          file=sys.stderr, flush=True)  # fmt: skip
    os._exit(code)


def handle_sweep_signals() -> dict:
    """In the sweep process, while its runs are launched: SIGINT and SIGTERM end it at once, in one line,
    after ``ON_SWEEP_SIGNAL``, when no run of its own is training (run_child then handles them); a parallel
    launcher's workers see it gone and stop their runs. Returns the handlers it replaced, for
    ``restore_signals`` once the runs have ended."""

    def stop(signum, frame) -> None:
        for other in _CODES:  # a second Ctrl-C while it cleans up would cut the cleanup short
            signal.signal(other, signal.SIG_IGN)
        for cleanup in ON_SWEEP_SIGNAL:
            try:
                cleanup()
            except Exception as err:  # noqa: BLE001 - said, and the sweep still ends
                print(f"[sweep] {err}", file=sys.stderr)
        sys.stdout.flush()
        print(f"[sweep] stopped by {signal.Signals(signum).name}: each run still training saves its state and "
              "stops; run the same command again to resume the sweep (finished runs are kept), or `python "
              "sweep.py report <its folder>` for a report of the runs finished so far",
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(_CODES[signum])

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, stop) for signum in _CODES}


def restore_signals(previous: dict) -> None:
    """Undo handle_sweep_signals: the sweep's runs have ended (its report comes next), or it ran in a test."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    ON_SWEEP_SIGNAL.clear()
    os.environ.pop(SWEEP_PROCESS, None)
    if _WARNINGS_BEFORE:
        before = _WARNINGS_BEFORE[0]
        _WARNINGS_BEFORE.clear()
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


def _state(code: int, run_dir: Path) -> str:
    """What a run stopped by a signal left, as train.py's exit status and its folder say: 130/143 once it has
    saved its state, or stopped where there was none to save (preparing its data, before its first
    checkpoint), or while making its final scores; 0 when it had finished."""
    from nmt.training.run_folder import finished_results, resumable, trained_results

    if code == 0:
        return "had finished"
    if code < 0:  # ended by the signal itself: as train.py started (before its handlers) or as it exited
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        if finished_results(run_dir):
            return f"had finished when {name} ended it (its results are kept)"
        if trained_results(run_dir):
            return f"was ended by {name} making its final scores (its training is kept; a rerun makes them)"
        if resumable(run_dir):
            return f"was ended by {name} before it could save (a rerun resumes it from its last checkpoint)"
        return f"was ended by {name} as it started, before its first checkpoint: a rerun starts it"
    if code not in (130, 143):
        return f"ended with status {code} (its train_stderr.log)"
    if trained_results(run_dir):
        return "was stopped making its final scores (its training is kept; a rerun makes them)"
    if resumable(run_dir):
        return "saved its state"
    return "was stopped before its first checkpoint (preparing its data, or its first updates): a rerun starts it"


def run_child(command: list[str], env: dict, run_dir: Path) -> int:
    """Run train.py with its output streamed into the run folder as it is written (each sitting appends
    under a header). The child has a process group of its own, so that a terminal's Ctrl-C reaches this
    process alone, which passes the child that one signal (two, the terminal's and this one's, would be a
    second Ctrl-C to it), waits for it to save its state, and ends in one line; SIGTERM the same. Only a
    second Ctrl-C to the sweep process stops the run at once; in a launcher's worker, further signals are
    ignored (a launcher may pass on the terminal's signal too). In a worker the run also stops when the
    sweep process has gone, and the worker then ends."""
    worker = in_a_worker()
    end_worker_if_sweep_gone(run_dir.name)
    env = {k: v for k, v in env.items() if k != SWEEP_PROCESS}  # the run is no part of the sweep's machinery
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    main = threading.current_thread() is threading.main_thread()
    received: list[int] = []  # the signals this process got while its run trained
    stopping, at_once = threading.Event(), threading.Event()
    process: subprocess.Popen | None = None

    def on_signal(signum, frame) -> None:
        # nothing raised here: the wait below goes on (PEP 475), and the state is read when it returns
        received.append(signum)
        if process is None:
            return
        if len(received) == 1:
            stopping.set()
            process.send_signal(signum)
        elif not worker and signum == received[0] == signal.SIGINT and not at_once.is_set():
            at_once.set()
            process.kill()

    previous = {signum: signal.signal(signum, on_signal) for signum in _CODES} if main else {}
    sweep_gone = None
    try:
        with open(run_dir / "train_stdout.log", "a") as out, open(run_dir / "train_stderr.log", "a") as err:
            for handle in (out, err):
                handle.write(f"==== sitting started {stamp}\n")
                handle.flush()
            process = subprocess.Popen(
                command,
                env=env,
                cwd=os.getcwd(),
                stdout=out,
                stderr=err,
                preexec_fn=functools.partial(stop_with_parent, os.getpid()),
                start_new_session=True,
            )
            if received and not stopping.is_set():  # a signal while it started
                stopping.set()
                process.send_signal(received[0])
            sweep_gone = watch_sweep(process, stopping) if worker else None
            try:
                code = process.wait()
            except BaseException:  # the sweep fails otherwise: the child saves its state and stops too
                process.send_signal(signal.SIGTERM)
                process.wait()
                raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        name = signal.Signals(received[0]).name
        state = (
            "was stopped at once by a second Ctrl-C (its last checkpoint stands)"
            if at_once.is_set()
            else _state(code, run_dir)
        )
        message = f"stopped by {name}: {run_dir.name} {state}"
        if worker:
            end_worker(message, _CODES[received[0]])
        print(f"[sweep] {message}; run the same command again to resume the sweep (finished runs are kept), "
              f"or `python sweep.py report {run_dir.parent}` for a report of the runs finished so far",
              file=sys.stderr, flush=True)  # fmt: skip
        raise SystemExit(_CODES[received[0]])
    if sweep_gone is not None and sweep_gone.is_set():
        end_worker(f"the sweep process has gone: {run_dir.name} {_state(code, run_dir)}", 143)
    return code
