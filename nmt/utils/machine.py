"""What machine computed a result: its CPU (model, cores, bf16 units) and the threads torch used.

The thread count and the hardware change the order in which float sums are taken, so two runs of the same
settings on other machines or thread counts differ in their last bits, and over many updates in their scores:
recorded beside a run's results, never part of its identity (nmt.training.run_identity)."""

import functools
import os
import platform
from pathlib import Path


@functools.cache
def cpu_name() -> str:
    """The CPU's model name, its core count and whether it has bf16 matrix units (AMX) or bf16 vector
    instructions (AVX-512 BF16): without either, bf16 is emulated and far slower than fp32."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    units = "AMX-BF16" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else "no bf16 units"
    return f"{name}, {os.cpu_count()} cores, {units}"


def machine_record(device: str = "cpu") -> dict:
    """The CPU, torch's thread count and the accelerator (``device``: the training strategy's root device type)."""
    import torch

    record = {"cpu": cpu_name(), "threads": torch.get_num_threads()}
    if device == "cuda" and torch.cuda.is_available():
        record["gpu"] = torch.cuda.get_device_name()
    return record


def resume_machine_note(saved: dict | None, device: str = "cpu") -> str | None:
    """A line where a resumed sitting computes on another CPU, GPU or thread count than the checkpoint's: the
    run goes on exactly, but not bitwise as the uninterrupted run would have (None where the same, or unknown)."""
    if not saved:
        return None
    now = machine_record(device)
    changed = [
        f"{key} {saved[key]} -> {now[key]}"
        for key in ("cpu", "gpu", "threads")
        if key in saved and saved[key] != now.get(key)
    ]
    if not changed:
        return None
    return (
        f"note: this sitting computes on another machine than the checkpoint's ({'; '.join(changed)}): floats are "
        "summed in another order, so the run continues correctly but not bit for bit as it would have gone on"
    )
