"""CUDA's Multi-Process Service (MPS) for the runs of a sweep that share a GPU (``gpu_mps=true``).

Without MPS the processes on one GPU take turns: each has its own context, and the GPU runs one context's
kernels at a time, so small models whose kernels each fill a few of its multiprocessors leave the rest idle
while the other runs wait. Under MPS their kernels run side by side. A CUDA program that finds no MPS
daemon runs without it and says nothing, so the sweep starts the daemon itself (``nvidia-cuda-mps-control
-d``, with its pipes and logs in a folder of its own), gives its runs that folder, watches whether any run
connected, and shuts the daemon down at its end.

The daemon renumbers the GPUs it sees: a run's ``CUDA_VISIBLE_DEVICES`` counts among the sweep's visible
GPUs (:func:`client_devices`), not among the machine's.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
RECORD = "mps.json"  # in the sweep folder: the daemon's folder and the MPS servers seen while the runs went


class MpsError(RuntimeError):
    """The daemon could not be started or reached; the message says what to do."""


def sweep_folder(sweep_dir: Path) -> Path:
    """The daemon's folder for a sweep: short (its sockets' paths are limited to about 100 characters), one
    per user and sweep, and the same at every sitting, so that a rerun finds a daemon that a killed sitting
    left running and shuts it down at its end."""
    digest = hashlib.sha256(str(Path(sweep_dir).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"nmt-mps-{os.getuid()}-{digest}"


def client_devices(devices: list[str], visible: list[str]) -> list[str]:
    """The GPUs ``devices`` (ids as the sweep sees them) as a run under the daemon must name them: their
    places among ``visible``, the GPUs the daemon was started with."""
    return [str(visible.index(device)) for device in devices]


class MpsDaemon:
    """One MPS control daemon with its pipes in ``folder/pipe`` and its logs in ``folder/log``."""

    def __init__(self, folder: Path, program: str = CONTROL) -> None:
        self.folder, self.program = Path(folder), program
        self.env = {PIPE_ENV: str(self.folder / "pipe"), LOG_ENV: str(self.folder / "log")}

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
        except (OSError, subprocess.TimeoutExpired):
            return False

    def servers(self) -> list[int]:
        """The process ids of the MPS servers the daemon runs (one per GPU context shared by clients)."""
        done = self._control("get_server_list")
        if done.returncode != 0:
            raise MpsError(f"the MPS daemon in {self.folder} does not answer: {self._said(done)}")
        return [int(word) for word in done.stdout.split() if word.isdigit()]

    def start(self, wait_s: float = 20.0) -> bool:
        """Start the daemon, or adopt the one already answering here; True when it was started now."""
        if shutil.which(self.program) is None:
            raise MpsError(
                f"gpu_mps=true needs {self.program}, CUDA's MPS control program (it comes with NVIDIA's driver "
                "utilities), and it is not on PATH here: install it, or set gpu_mps=false (the runs of a GPU "
                "then take turns on it)"
            )
        for sub in self.env.values():
            Path(sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.running():
            return False
        done = subprocess.run(
            [self.program, "-d"], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=wait_s
        )
        deadline = time.monotonic() + wait_s
        while done.returncode == 0 and not self.running():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if done.returncode != 0 or not self.running():
            raise MpsError(
                f"{self.program} -d did not start a daemon that answers ({self._said(done)}); its log: "
                f"{self.log_tail()}; or set gpu_mps=false"
            )
        return True

    def stop(self, wait_s: float = 30.0) -> None:
        """Shut the daemon and its servers down (they wait for their clients to end) and remove the folder."""
        if self.running():
            self._control("quit", timeout_s=wait_s)
            deadline = time.monotonic() + wait_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self, lines: int = 5) -> str:
        texts = []
        for log in sorted(Path(self.env[LOG_ENV]).glob("*.log")):
            tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
            texts.append(f"{log.name}: " + " | ".join(tail))
        return "; ".join(texts) or "empty"

    @staticmethod
    def _said(done: subprocess.CompletedProcess) -> str:
        return " ".join(f"{done.stdout} {done.stderr}".split()) or f"exit {done.returncode}"


class ServerWatch:
    """Asks the daemon for its servers every ``every_s`` seconds while runs go, in a thread: a run that
    reached the daemon made a server appear, a sweep whose runs never did ran without MPS."""

    def __init__(self, daemon: MpsDaemon, every_s: float = 10.0) -> None:
        self.daemon, self.every_s = daemon, every_s
        self.seen: set[int] = set()
        self.most = 0  # the most servers at one time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mps-watch", daemon=True)

    def _watch(self) -> None:
        while True:
            self.look()
            if self._stop.wait(self.every_s):
                return

    def look(self) -> None:
        try:
            servers = self.daemon.servers()
        except (MpsError, OSError, subprocess.TimeoutExpired):
            return  # a daemon gone missing is found by the look at the end
        self.seen.update(servers)
        self.most = max(self.most, len(servers))

    def start(self) -> "ServerWatch":
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop watching (with a last look); what was seen."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.look()
        return {"servers_seen": sorted(self.seen), "most_servers_at_once": self.most}


def setting_problem(config) -> str | None:
    """One line when ``gpu_mps=true`` cannot apply: it runs the runs of one GPU side by side, so it needs
    the GPU pool with more than one run per GPU."""
    if not config.get("gpu_mps"):
        return None
    if not config.get("gpu_pool") or int(config.get("runs_per_gpu", 1)) < 2:
        return (
            f"gpu_mps=true runs the runs of one GPU side by side: it needs gpu_pool=true and runs_per_gpu >= 2 "
            f"(given gpu_pool={config.get('gpu_pool')}, runs_per_gpu={config.get('runs_per_gpu')})"
        )
    return None


def start_mps(config, sweep_dir: Path) -> tuple[MpsDaemon, ServerWatch]:
    """The sweep's daemon, started (or adopted from a killed sitting) and watched; a daemon that cannot
    start stops the sweep before any run (SystemExit: Hydra turns a callback's exception into a warning)."""
    import atexit
    import sys

    daemon = MpsDaemon(sweep_folder(sweep_dir))
    try:
        started = daemon.start()
    except MpsError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    atexit.register(daemon.stop)  # a sweep that dies before its end leaves no daemon behind
    how = "started" if started else "left running by an earlier sitting, adopted"
    print(f"[sweep] MPS daemon {how} ({PIPE_ENV}={daemon.env[PIPE_ENV]}): the runs of a GPU run side by side")
    return daemon, ServerWatch(daemon).start()


def finish_mps(daemon: MpsDaemon, watch: ServerWatch, sweep_dir: Path) -> dict:
    """Record whether the runs reached the daemon (``mps.json``), say so, and shut the daemon down."""
    from nmt.utils.io import atomic_write_json

    seen = {**watch.stop(), PIPE_ENV: daemon.env[PIPE_ENV]}
    atomic_write_json(Path(sweep_dir) / RECORD, seen)
    daemon.stop()
    if seen["servers_seen"]:
        print(f"[sweep] MPS: {len(seen['servers_seen'])} server(s) ran the runs' kernels; daemon shut down")
    else:
        print(
            "[sweep] warning: no run reached the MPS daemon (no server appeared): the runs of a GPU took turns "
            f"on it. Its log: {daemon.log_tail()}"
        )
    return seen
