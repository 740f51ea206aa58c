"""CUDA's Multi-Process Service (MPS) daemon, for the runs of a sweep that share a GPU (``gpu_mps=true``; the
sweep's side is in :mod:`nmt.sweep.gpus`).

Without MPS the processes on one GPU take turns: each has its own context, and the GPU runs one context's
kernels at a time, so small models whose kernels each fill a few of its multiprocessors leave the rest idle
while the other runs wait. Under MPS their kernels run side by side. A CUDA program that finds no MPS
daemon runs without it and says nothing, so the sweep starts the daemon itself (``nvidia-cuda-mps-control
-d``), gives its runs the daemon's pipes, watches how many runs are connected, and shuts it down at its end.

One daemon serves a user's sweeps that see the same GPUs (its folder is named by the user and by the list
of visible GPUs), so that two sweeps sharing the GPU pool share one MPS server as well. Each sitting
of a sweep holds a shared lock on the folder while it runs; the last one out shuts the daemon down. A sitting
that was killed drops its lock with its process, and the next sitting adopts the daemon it left.

The daemon renumbers the GPUs it sees: a run's ``CUDA_VISIBLE_DEVICES`` counts among the sweep's visible
GPUs (:func:`client_devices`), not among the machine's.
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
WATCH_ENV = "NMT_MPS_WATCH_S"  # seconds between two looks at the daemon's clients (default 10), read as a watch starts
QUITTING = "quitting"  # in the daemon's folder: a quit that was still waiting for clients when its sitting left


class MpsError(RuntimeError):
    """The daemon could not be started or reached; the message says what to do."""


def daemon_folder(visible: str) -> Path:
    """The daemon's folder for this user and these visible GPUs (a list, in the order the daemon numbers
    them): in /tmp, as NVIDIA's own default, so that its sockets' paths stay short (about 100 characters at
    most) and every sitting finds it whatever its own temporary folder. ``ls -d /tmp/nmt-mps-$(id -u)-*``
    lists a user's."""
    digest = hashlib.sha256(visible.encode()).hexdigest()[:12]
    return Path("/tmp") / f"nmt-mps-{os.getuid()}-{digest}"


def client_devices(devices: list[str], visible: list[str]) -> list[str]:
    """The GPUs ``devices`` (ids as the sweep sees them) as a run under the daemon must name them: their
    places among ``visible``, the GPUs the daemon was started with."""
    return [str(visible.index(device)) for device in devices]


class MpsDaemon:
    """One MPS control daemon with its pipes in ``folder/pipe`` and its logs in ``folder/log``; ``join``
    before the runs start (starting it, or adopting the one running), ``leave`` after."""

    def __init__(self, folder: Path, program: str = CONTROL) -> None:
        self.folder, self.program = Path(folder), program
        self.env = {PIPE_ENV: str(self.folder / "pipe"), LOG_ENV: str(self.folder / "log")}
        self._sitting = None  # the open lock file while this process takes part

    def _control(self, command: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.program],
            input=command + "\n",
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def running(self) -> bool:
        """Whether a daemon answers at this folder's pipes."""
        try:
            return self._control("get_server_list").returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def servers(self) -> list[int]:
        """The process ids of the daemon's MPS servers (one per user whose clients it serves)."""
        done = self._control("get_server_list")
        if done.returncode != 0:
            raise MpsError(f"the MPS daemon in {self.folder} does not answer: {_said(done)}")
        return [int(word) for word in done.stdout.split() if word.isdigit()]

    def clients(self, server: int) -> list[int] | None:
        """The process ids of the clients connected to ``server``; None when the daemon does not say."""
        done = self._control(f"get_client_list {server}")
        return [int(w) for w in done.stdout.split() if w.isdigit()] if done.returncode == 0 else None

    def _make_folder(self) -> None:
        """The folder, private to this user: a folder of that name that another user made, or that others
        may write to, is refused (the daemon's sockets would be theirs to replace)."""
        try:
            self.folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        found = self.folder.lstat()
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
            raise MpsError(
                f"{self.folder} is not a folder of this user's that only it may enter: remove it, or set gpu_mps=false"
            )
        for sub in self.env.values():
            Path(sub).mkdir(mode=0o700, exist_ok=True)

    def join(self, wait_s: float = 20.0) -> bool:
        """Take part: start the daemon, or adopt the one that answers here. True when it was started now."""
        if shutil.which(self.program) is None:
            raise MpsError(
                f"gpu_mps=true needs {self.program}, CUDA's MPS control program (it comes with NVIDIA's driver "
                "utilities), and it is not on PATH here: install it, or set gpu_mps=false (the runs of a GPU "
                "then take turns on it)"
            )
        self._make_folder()
        with self._changing():  # one sitting at a time starts or stops the daemon
            self._wait_for_quit(wait_s)
            started = not self.running()
            if started:
                self._start(wait_s)
            sitting = open(self.folder / "sittings.lock", "a")  # noqa: SIM115 - held until leave()
            fcntl.flock(sitting, fcntl.LOCK_SH)  # held while this sitting uses the daemon
        self._sitting = sitting
        return started

    @contextlib.contextmanager
    def _changing(self):
        with open(self.folder / "change.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _wait_for_quit(self, wait_s: float) -> None:
        """A daemon told to quit accepts no new client but answers until its last client ends: wait for it to
        go, rather than join it."""
        marker = self.folder / QUITTING
        if not marker.exists():
            return
        deadline = time.monotonic() + wait_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.5)
        if self.running():
            raise MpsError(
                f"the MPS daemon in {self.folder} is still shutting down (runs of an earlier sweep have not ended): "
                f"wait for them, or end them and `echo quit | {PIPE_ENV}={self.env[PIPE_ENV]} {self.program}`"
            )
        marker.unlink()

    def _start(self, wait_s: float) -> None:
        for old in Path(self.env[LOG_ENV]).glob("*.log"):  # an earlier daemon's: its lines would mislead
            old.unlink()
        log = Path(self.env[LOG_ENV]) / "start.out"
        with log.open("w") as out:  # a file, not a pipe: the daemon may keep what it inherits open
            code = subprocess.run(
                [self.program, "-d"],
                env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                timeout=wait_s,
            ).returncode
        deadline = time.monotonic() + wait_s
        while code == 0 and not self.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        if code != 0 or not self.running():
            said = " ".join(log.read_text(errors="replace").split()) or f"exit {code}"
            raise MpsError(
                f"{self.program} -d did not start a daemon that answers ({said}); its log: {self.log_tail()}; "
                "or set gpu_mps=false"
            )

    def leave(self, wait_s: float = 30.0) -> str:
        """Stop taking part; the last sitting out shuts the daemon down (its servers wait for their clients).
        Returns what happened, in words."""
        sitting, self._sitting = self._sitting, None
        if sitting is None:
            return "not joined"
        with self._changing():
            fcntl.flock(sitting, fcntl.LOCK_UN)
            try:
                fcntl.flock(sitting, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken only when no other sitting holds it
            except BlockingIOError:
                sitting.close()
                return "left running for the other sittings using it"
            try:
                self._control("quit", timeout_s=wait_s)
            except (OSError, subprocess.SubprocessError):
                pass
            deadline = time.monotonic() + wait_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.2)
            sitting.close()
            if self.running():  # its clients still end: the next sitting waits for it to go
                (self.folder / QUITTING).touch()
        if self.running():
            return (
                f"still running after {wait_s:.0f} s: stop it with "
                f"`echo quit | {PIPE_ENV}={self.env[PIPE_ENV]} {self.program}`"
            )
        return "shut down"

    def log_tail(self, lines: int = 5) -> str:
        texts = []
        for log in sorted(Path(self.env[LOG_ENV]).glob("*.log")):
            tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
            texts.append(f"{log.name}: " + " | ".join(tail))
        return "; ".join(texts) or "empty"

    def copy_logs(self, to: Path) -> None:
        to.mkdir(parents=True, exist_ok=True)
        for log in Path(self.env[LOG_ENV]).glob("*.log"):
            shutil.copyfile(log, to / log.name)


def _said(done: subprocess.CompletedProcess) -> str:
    return " ".join(f"{done.stdout} {done.stderr}".split()) or f"exit {done.returncode}"


def machine_wide_daemon() -> bool:
    """Whether a daemon answers at NVIDIA's default pipes (/tmp/nvidia-mps): then every CUDA program of the
    machine that is not told otherwise runs under MPS, runs meant to take turns included."""
    if shutil.which(CONTROL) is None:
        return False
    env = {k: v for k, v in os.environ.items() if k != PIPE_ENV}
    try:
        done = subprocess.run([CONTROL], input="get_server_list\n", env=env, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


class ServerWatch:
    """Asks the daemon every ``every_s`` seconds, in a thread, for its servers and their clients while the
    runs go: a run that reached the daemon is one of those clients."""

    def __init__(self, daemon: MpsDaemon, every_s: float | None = None, mine: str | None = None) -> None:
        """``every_s``: by default ``NMT_MPS_WATCH_S``, or 10; ``mine``: count only the clients whose command
        line holds it (the sweep's folder: the daemon may serve other sweeps' runs too)."""
        if every_s is None:
            every_s = float(os.environ.get(WATCH_ENV, "10"))
        self.daemon, self.every_s, self.mine = daemon, every_s, mine
        self.seen: set[int] = set()
        self.most_clients: int | None = None  # the most runs connected at one time (None: never told)
        self.misses = 0  # looks at which the daemon did not answer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mps-watch", daemon=True)

    def _watch(self) -> None:
        while True:
            self.look()
            if self._stop.wait(self.every_s):
                return

    def look(self) -> bool:
        """One look; False when the daemon did not answer."""
        try:
            servers = self.daemon.servers()
            clients = [self.daemon.clients(server) for server in servers]
        except (MpsError, OSError, subprocess.SubprocessError):
            self.misses += 1
            return False
        self.seen.update(servers)
        if all(c is not None for c in clients):
            ours = [pid for c in clients for pid in c if self.mine is None or self.mine in _command_line(pid)]
            self.most_clients = max(self.most_clients or 0, len(ours))
        return True

    def start(self) -> "ServerWatch":
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop watching; what was seen, and whether the daemon still answers."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return {
            "servers_seen": sorted(self.seen),
            "most_clients_at_once": self.most_clients,
            "looks_unanswered": self.misses,
            "answers_at_end": self.look(),
        }


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # ended, or another user's
        return ""
