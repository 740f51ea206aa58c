"""Handing a sweep's runs the GPUs of one machine: each run takes free slots from a pool and gives them back
when it ends, so that no GPU idles while two runs share another; with ``gpu_mps``, the runs of a GPU run side
by side under the sweep's MPS daemon (:mod:`nmt.sweep.mps`).

A slot is one run's share of one GPU (``runs_per_gpu`` slots per GPU, for small models); a run takes
``gpus_per_run`` slots on as many different GPUs (DDP inside the run). Slots are files locked with
``flock`` in a folder shared by every sweep of the machine, so two sweeps never hand out the same slot,
and a slot whose holder died is free again at once (the kernel drops its lock).
"""

import fcntl
import os
import tempfile
import time
from pathlib import Path

from nmt.sweep.mps import PIPE_ENV, MpsDaemon, ServerWatch, daemon_folder

LOCK_DIR_ENV = "NMT_GPU_LOCKS"


def visible_gpus() -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else every GPU torch sees."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def default_lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "nmt-gpu-slots")


def _open_slot(path: Path):
    """A slot file opened read-only (enough for flock), created writable by every user."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    return os.fdopen(descriptor, "r")


class GpuPool:
    """``with GpuPool(devices, ...).take() as gpus:`` runs with ``gpus`` (device ids) held."""

    def __init__(
        self,
        devices: list[str],
        runs_per_gpu: int = 1,
        gpus_per_run: int = 1,
        lock_dir: Path | None = None,
        poll_s: float = 1.0,
    ) -> None:
        if runs_per_gpu < 1 or gpus_per_run < 1:
            raise ValueError(f"runs_per_gpu={runs_per_gpu}, gpus_per_run={gpus_per_run}: both must be >= 1")
        if gpus_per_run > len(devices):
            raise ValueError(f"gpus_per_run={gpus_per_run}: this machine shows {len(devices)} GPU(s) {devices}")
        self.devices, self.runs_per_gpu, self.gpus_per_run = list(devices), runs_per_gpu, gpus_per_run
        self.lock_dir, self.poll_s = Path(lock_dir or default_lock_dir()), poll_s
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        try:  # shared by every user of the machine, as /tmp is
            os.chmod(self.lock_dir, 0o1777)
        except PermissionError:
            pass

    def _try_slot(self, device: str):
        """An open, locked slot file of ``device``, or None when it runs as many runs as this pool or any of
        its holders allows. Each slot's name holds its pool's ``runs_per_gpu``: a sweep of 1 run a GPU took
        one where another sweep's run of 2 a GPU already was, and that run's sweep then added a second one."""
        with _open_slot(self.lock_dir / f"gpu{device}.lock") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)  # one taker of this GPU at a time: its count and its take are one step
            limits = self._holders(device)
            if len(limits) >= min([self.runs_per_gpu, *limits]):
                return None
            for slot in range(self.runs_per_gpu):
                handle = _open_slot(self.lock_dir / f"gpu{device}.of{self.runs_per_gpu}.slot{slot}.lock")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return handle
                except BlockingIOError:
                    handle.close()
        return None

    def try_take(self) -> "Held | None":
        """Slots on ``gpus_per_run`` different GPUs, the least busy first, or None (nothing held)."""
        held = []
        for device in sorted(self.devices, key=self._busy):
            handle = self._try_slot(device)
            if handle is not None:
                held.append((device, handle))
            if len(held) == self.gpus_per_run:
                return Held(held)
        for _, handle in held:
            handle.close()  # closing drops the lock
        return None

    def _holders(self, device: str) -> list[int]:
        """The ``runs_per_gpu`` of each run holding a slot of the device now (by any process, any sweep)."""
        limits = []
        for path in self.lock_dir.glob(f"gpu{device}.of*.slot*.lock"):
            with _open_slot(path) as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(handle, fcntl.LOCK_UN)
                except BlockingIOError:
                    limits.append(int(path.name.split(".")[1].removeprefix("of")))
        return limits

    def _busy(self, device: str) -> int:
        """How many runs hold a slot of the device now."""
        return len(self._holders(device))

    def take(self, timeout_s: float | None = None) -> "Held":
        """Wait until enough slots are free, then hold them."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            held = self.try_take()
            if held is not None:
                return held
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no {self.gpus_per_run} free GPU slot(s) among {self.devices} in {timeout_s} s")
            time.sleep(self.poll_s)


class Held:
    """Slots held by one run; released on exit (or when the process dies)."""

    def __init__(self, slots: list) -> None:
        self.slots = slots

    @property
    def devices(self) -> list[str]:
        return [device for device, _ in self.slots]

    def release(self) -> None:
        for _, handle in self.slots:
            handle.close()
        self.slots = []

    def __enter__(self) -> list[str]:
        return self.devices

    def __exit__(self, *exc) -> None:
        self.release()


# ---- runs side by side under MPS (gpu_mps) ----------------------------------------------------------------
RECORD = "mps.json"  # in the sweep folder: each sitting's daemon and the connections seen while its runs went
LOGS = "mps_logs"  # in the sweep folder: the daemon's logs, copied at the end of each sitting
# the launcher that starts a sweep's runs side by side on this machine with its CUDA_VISIBLE_DEVICES (the
# basic one starts them one after another; submitit's local one sets each job's own GPUs, which the daemon
# would not number the same; the others run them on other machines)
LAUNCHERS = ("JoblibLauncher",)


def mps_folder() -> Path:
    """The MPS daemon's folder for the GPUs this process sees (the sweep and its jobs see the same)."""
    return daemon_folder(",".join(visible_gpus()))


def pool_problem(config, machine: bool = True) -> str | None:
    """One line when the GPU pool's settings cannot apply: ``runs_per_gpu`` or ``gpus_per_run`` without
    ``gpu_pool=true`` (read by nothing), or, with ``machine``, a pool whose runs would see fewer GPUs than a
    run takes where the launcher starts them on this machine (basic, joblib: the machine's GPUs; submitit's
    local launcher: each job its first ``hydra.launcher.gpus_per_node``). Other launchers start runs where
    their GPUs are, unseen from here. ``plan=true`` on a machine without them says so instead of refusing."""
    sizes = {key: config.get(key, 1) for key in ("runs_per_gpu", "gpus_per_run")}
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{key}={value!r}: must be a whole number >= 1"
    if not config.get("gpu_pool"):
        given = [f"{key}={value}" for key, value in sizes.items() if value != 1]
        it = "it" if len(given) == 1 else "them"
        return (
            f"{' '.join(given)}: read by the GPU pool alone (gpu_pool=true); add that, or remove {it}"
            if given
            else None
        )
    # the pool sets each run's trainer.devices to gpus_per_run: another count given was overridden unsaid
    # (trainer=ddp's 2 devices with gpus_per_run=1 trained on one GPU, without DDP)
    typed = [str(o) for o in ((config.get("hydra") or {}).get("overrides") or {}).get("task") or []]
    given = next((o.lstrip("+~") for o in typed if o.lstrip("+~").partition("=")[0] == "trainer.devices"), None)
    devices = (config.get("trainer") or {}).get("devices", 1)
    takes = f"with gpu_pool=true each run takes gpus_per_run={sizes['gpus_per_run']} GPU(s) from the pool, which sets"
    if given is not None and given.partition("=")[2] != str(sizes["gpus_per_run"]):
        return f"{given}: {takes} trainer.devices to it; give the GPUs a run takes as gpus_per_run=N instead"
    if given is None and sizes["gpus_per_run"] == 1 and devices not in (1, "1", "auto"):
        # a trainer option's own count (trainer=ddp's 2) under the default gpus_per_run: the pool's 1 wins
        return (
            f"trainer.devices={devices} (the trainer option's): {takes} trainer.devices to it; give "
            f"gpus_per_run={devices} for runs of {devices} GPUs"
        )
    if not machine:
        return None
    launcher = (config.get("hydra") or {}).get("launcher", {})
    target = str(launcher.get("_target_", ""))
    devices = visible_gpus()
    seen = f"this machine shows {len(devices)} GPU(s)" + (f" ({', '.join(devices)})" if devices else "")
    if target.endswith("LocalLauncher"):  # submitit's: a job sees its first gpus_per_node GPUs, none by default
        per_node = int(launcher.get("gpus_per_node") or 0)
        shown = min(per_node, len(devices))
        seen = (
            f"each job of hydra/launcher=submitit_local sees {shown} (hydra.launcher.gpus_per_node={per_node}; {seen})"
        )
        devices = devices[:per_node]
    elif target and not target.endswith(("BasicLauncher", *LAUNCHERS)):
        return None
    if sizes["gpus_per_run"] > len(devices):
        return (
            f"gpu_pool=true: a run takes gpus_per_run={sizes['gpus_per_run']} GPU(s) and {seen}; run the sweep where "
            "its GPUs are, or set gpu_pool=false"
        )
    return None


def setting_problem(config) -> str | None:
    """One line when ``gpu_mps=true`` cannot apply: it runs the runs of one GPU side by side, so it needs
    the GPU pool with more than one run per GPU, one GPU per run, and runs on this machine."""
    if not config.get("gpu_mps"):
        return None
    given = f"given gpu_pool={config.get('gpu_pool')}, runs_per_gpu={config.get('runs_per_gpu')}"
    if not config.get("gpu_pool") or int(config.get("runs_per_gpu", 1)) < 2:
        return "gpu_mps=true runs the runs of one GPU side by side: it needs gpu_pool=true and runs_per_gpu >= 2 " + (
            f"({given})"
        )
    if int(config.get("gpus_per_run", 1)) != 1:
        return f"gpu_mps=true is for runs of one GPU each (given gpus_per_run={config.gpus_per_run}): set gpu_mps=false"
    launcher = str((config.get("hydra") or {}).get("launcher", {}).get("_target_", ""))
    if launcher and not launcher.endswith(LAUNCHERS):
        return (
            f"gpu_mps=true needs the runs started side by side on this machine, with its GPUs: the launcher "
            f"{launcher.split('.')[-1]} does not; use hydra/launcher=joblib hydra.launcher.n_jobs=<GPUs x "
            "runs_per_gpu>, or set gpu_mps=false"
        )
    return None


def start_mps(sweep_dir: Path) -> tuple[MpsDaemon, ServerWatch]:
    """The sweep's daemon, started or adopted, and watched. Anything that keeps it from answering stops the
    sweep before any run (SystemExit: Hydra turns a callback's exception into a warning and goes on)."""
    import atexit
    import sys

    daemon = MpsDaemon(mps_folder())
    try:
        started = daemon.join()
    except Exception as err:  # noqa: BLE001 - a timeout or a folder error too: no run may start without MPS
        print(f"error: gpu_mps=true: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    # on an exception or Ctrl-C (after on_multirun_end, a no-op); a killed sweep's lock goes with its process
    atexit.register(lambda: (said := daemon.leave()) == "not joined" or print(f"[sweep] MPS daemon: {said}"))
    how = "started" if started else "running already (another sweep, or a sitting that was killed), joined"
    print(f"[sweep] MPS daemon {how} ({PIPE_ENV}={daemon.env[PIPE_ENV]}): the runs of a GPU run side by side")
    # a run's command line names its folder, <sweep>/<factor values>: the slash keeps sweeps/tune_adam's runs
    # out of sweeps/tune's count
    return daemon, ServerWatch(daemon, mine=f"{Path(sweep_dir).resolve()}/").start()


def finish_mps(daemon: MpsDaemon, watch: ServerWatch, sweep_dir: Path, runs_started: int) -> dict:
    """Say whether this sitting's runs reached the daemon, add the sitting to ``mps.json``, keep the
    daemon's logs in ``mps_logs/``, and leave the daemon (the last sitting out shuts it down). A failure
    here is said, not raised: the report comes next."""
    import json

    from nmt.utils.io import atomic_write_json

    try:
        seen = {**watch.stop(), "runs_started": runs_started, PIPE_ENV: daemon.env[PIPE_ENV]}
        daemon.copy_logs(Path(sweep_dir) / LOGS)
        log = daemon.log_tail()
        seen["daemon"] = daemon.leave()
        path = Path(sweep_dir) / RECORD
        sittings = json.loads(path.read_text()).get("sittings", []) if path.is_file() else []
        atomic_write_json(path, {"sittings": [*sittings, seen]})
    except Exception as err:  # noqa: BLE001
        print(f"[sweep] warning: the MPS daemon's end could not be recorded: {type(err).__name__}: {err}")
        return {}
    most = seen["most_clients_at_once"]  # this sweep's runs only; None: the daemon does not list clients
    if runs_started and (not seen["servers_seen"] or most == 0):
        print(
            f"[sweep] warning: none of the {runs_started} run(s) started in this sitting was seen connected to the "
            f"MPS daemon: they may have taken turns on their GPU. Its log ({LOGS}/): {log}"
        )
    elif runs_started:
        connected = "an unknown number of" if most is None else f"at most {most}"
        print(f"[sweep] MPS: {connected} of this sweep's runs connected at once; daemon {seen['daemon']}")
    if seen["looks_unanswered"] or not seen["answers_at_end"]:
        print(f"[sweep] warning: the MPS daemon did not always answer (see {LOGS}/); a run due then was not started")
    return seen
