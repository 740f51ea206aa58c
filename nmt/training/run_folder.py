"""A run folder's ownership and state: who is writing into it, what it holds, and whether the run in it has
finished. (What the run in it was made with: :mod:`nmt.training.run_identity`.)

- ``.lock`` is held (``flock``) by the process training in the folder; a second one refuses to start and
  names the holder. The kernel drops the lock when its holder dies, however it dies.
- ``results.json`` with ``"finished": true`` marks a finished run: rerunning its command reports it and
  keeps its results.
- Under DDP the first process owns the folder; the others follow it and end with it.
"""

import fcntl
import json
import os
import signal
import socket
import time
from pathlib import Path

from nmt.utils.io import atomic_write_bytes
from nmt.utils.parent_death import signal_on_parent_death
from nmt.utils.ranks import first_process

LOCK = ".lock"
RESULTS = "results.json"


class RunFolderError(ValueError):
    """The run folder belongs to another run (other settings, another process)."""


def owns_run_folder() -> bool:
    """Whether this process owns the run folder: DDP starts one process per device, and rank 0 owns it
    (Lightning's launcher, torchrun and srun each name the rank in the environment)."""
    return first_process()


# the process id of a run's first process, in the environment of the processes Lightning's launcher starts
# for the other devices (a copy of the first process's environment)
FIRST_PROCESS = "NMT_RUN_FIRST_PROCESS"


def follow_first_process() -> None:
    """At the start of each process of a run. The first (rank 0) names itself in the environment that the
    processes it starts for the other devices inherit; each of those has the kernel kill it when the first
    dies. A first process killed outright (SIGKILL, the machine's out-of-memory killer) left them waiting
    for it: 30 minutes at start-up, the collective operations' time-out later. They hold nothing to save
    (the first process writes the run's checkpoints), and a rerun resumes from its last one."""
    if owns_run_folder():
        os.environ[FIRST_PROCESS] = str(os.getpid())
        return
    named = os.environ.get(FIRST_PROCESS, "")
    if not named.isdigit():  # started by torchrun or srun (their ranks are siblings): their launcher ends them
        return
    first = int(named)
    if os.getppid() == first:
        # tied (not on Linux: left as a sweep's runs are), unless the first process died in between
        if signal_on_parent_death(signal.SIGKILL, first) or os.getppid() == first:
            return
    if _ended(first):  # the first process died before this one got here: nothing to wait for
        os._exit(137)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie its parent has not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:  # gone meanwhile; or no /proc (not Linux), where a zombie cannot be told
        return Path("/proc").is_dir()
    except OSError:
        return False


# what a sitting writes into its folder before training starts (its fingerprint, resolved config, tokenizers
# and data report): kept by a resumed sitting, to put back if it stops before its first update
RECORDS = ("fingerprint.json", "config.yaml", "tokenizers/src.model", "tokenizers/tgt.model")
RECORDS += ("data_report.json", "data_report.txt")
RECORDS += (RESULTS,)  # a finished run's, marked unfinished as a continuation starts: put back if it is refused
RECORDS += ("logs/hparams.yaml",)  # the CSV logger's copy of the settings, written as training starts


def folder_records(run_dir: Path) -> dict[str, bytes | None]:
    """The folder's records as they are (None: absent)."""
    return {name: (run_dir / name).read_bytes() if (run_dir / name).is_file() else None for name in RECORDS}


def restore_records(run_dir: Path, records: dict[str, bytes | None]) -> None:
    """Put the records back as :func:`folder_records` found them."""
    for name, content in records.items():
        path = run_dir / name
        if content is None:
            path.unlink(missing_ok=True)
        elif not path.is_file() or path.read_bytes() != content:  # a record left as it was is not rewritten
            atomic_write_bytes(path, content)


def saved_states(run_dir: Path) -> list[Path]:
    """The checkpoints a run wrote into its folder (epoch, best, last, and a cluster's requeue checkpoints)."""
    run_dir = Path(run_dir)
    return [*(run_dir / "checkpoints").glob("*.ckpt"), *run_dir.glob("hpc_ckpt_*.ckpt")]


def holds_work(run_dir: Path) -> bool:
    """Whether anything was trained in the folder: a checkpoint or results. A folder holding only its
    fingerprint (a run that stopped on a mistake before its first checkpoint) binds no later run."""
    return bool(saved_states(run_dir)) or (Path(run_dir) / RESULTS).is_file()


def finished_results(run_dir: Path) -> dict | None:
    """The results of a run that finished in this folder, or None."""
    path = run_dir / RESULTS
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        print(f"warning: {path} cannot be read ({err}): the run is taken up from its checkpoints and scored again")
        return None
    if not isinstance(results, dict):  # JSON, but not a run's results: as unreadable, said
        kind = type(results).__name__
        print(
            f"warning: {path} holds a {kind}, not a run's results: the run is taken up from its checkpoints and "
            "scored again"
        )
        return None
    if not results.get("finished"):
        return None
    return in_this_folder(results, run_dir)


def in_this_folder(results: dict, run_dir: Path) -> dict:
    """``results`` with the paths into the folder it was written in (``results["run_dir"]``) made paths into
    ``run_dir``: a finished run's folder moved or copied reports its own files, not the original's."""
    before = results.get("run_dir")
    run_dir = Path(run_dir).absolute()  # a sweep's records are read from a relative folder (sweeps/<name>)
    if not isinstance(before, str) or os.path.normpath(before) == os.path.normpath(run_dir):
        return results
    before = os.path.normpath(before)

    def moved(node):
        if isinstance(node, dict):
            return {key: moved(value) for key, value in node.items()}
        if isinstance(node, list):
            return [moved(value) for value in node]
        if isinstance(node, str) and (node == before or node.startswith(before + os.sep)):
            return str(run_dir) + node[len(before) :]
        return node

    return moved(results)


def resumable(run_dir: Path) -> bool:
    """Whether a run stopped in this folder before its end saved a state to resume from (last.ckpt)."""
    return (Path(run_dir) / "checkpoints" / "last.ckpt").is_file()


def trained_results(run_dir: Path) -> dict | None:
    """The record of a run whose training ended but whose final scores were stopped (``"stage":
    "trained"``), or None: a rerun then scores the final model without training or validating again."""
    try:
        results = json.loads((run_dir / RESULTS).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    trained = isinstance(results, dict) and results.get("stage") == "trained" and not results.get("finished")
    return results if trained else None


class RunLock:
    """Exclusive ownership of a run folder for as long as the process trains in it."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK
        self.handle = None

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held until __exit__
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunFolderError(
                f"{self.path.parent} is in use by {holder}; wait for that run to end, or choose another run_dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None
