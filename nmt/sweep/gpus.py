"""Handing a sweep's runs the GPUs of one machine: each run takes free slots from a pool and gives them back
when it ends, so that no GPU idles while two runs share another.

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
        """An open, locked slot file of ``device``, or None when all its slots are taken."""
        for slot in range(self.runs_per_gpu):
            handle = _open_slot(self.lock_dir / f"gpu{device}.slot{slot}.lock")
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

    def _busy(self, device: str) -> int:
        """How many of the device's slots are held now (by any process)."""
        busy = 0
        for slot in range(self.runs_per_gpu):
            path = self.lock_dir / f"gpu{device}.slot{slot}.lock"
            if not path.exists():
                continue
            with _open_slot(path) as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(handle, fcntl.LOCK_UN)
                except BlockingIOError:
                    busy += 1
        return busy

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
