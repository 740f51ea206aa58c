"""``python -m benchmarks.profiled_train --after N [train.py overrides]``: ``train.py`` with Lightning's simple
profiler (``+trainer.profiler=simple``) cleared after a warm-up of N updates, so that its report
(printed when ``fit`` ends) holds the steady state: the host's time per loop step and hook once compiling
and CUDA-graph recording are done, not their minutes spread over a few hundred updates.

After the warm-up, PyTorch's profiler also traces :data:`TRACED_UPDATES` updates and then the next
validation epoch, op by op (:class:`TraceOnce`): what the host spends its time on inside a step (operator
calls, kernel launches, waits for the device) and how long the device was busy, which the loop-level
report cannot say."""

import json
import runpy
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from nmt.training import trainer as trainer_module

ROOT = Path(__file__).resolve().parents[1]


class ClearProfilerAfter(Callback):
    """Forget every duration recorded before update ``after`` (once)."""

    def __init__(self, after: int) -> None:
        self.after, self.done = after, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        recorded = getattr(trainer.profiler, "recorded_durations", None)  # the simple profiler's
        if not self.done and trainer.global_step >= self.after and recorded is not None:
            recorded.clear()  # actions in progress (the epoch, this batch) still record when they end
            self.done = True


TRACED_UPDATES = 20


def trace_summary(profile, seconds: float, units: int, unit: str) -> dict:
    """Sums over a torch.profiler trace of ``units`` updates or validation batches that took ``seconds``."""
    events = profile.key_averages()

    def calls(*names: str) -> int:
        return sum(e.count for e in events if e.key in names)

    def self_host_ms(word: str) -> float:
        return sum(e.self_cpu_time_total for e in events if word in e.key) / 1000

    kernels_ms = sum(
        getattr(e, "self_device_time_total", 0) for e in events if e.device_type == torch.autograd.DeviceType.CUDA
    )
    return {
        "unit": unit,
        "units": units,
        "wall_ms_per_unit": 1000 * seconds / max(units, 1),
        "operator_calls_per_unit": sum(e.count for e in events if e.key.startswith("aten::")) / max(units, 1),
        "kernel_launches_per_unit": calls(
            "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"
        )
        / max(units, 1),
        "graph_launches_per_unit": calls("cudaGraphLaunch") / max(units, 1),
        "host_waits_ms_per_unit": self_host_ms("Synchronize") / max(units, 1),  # the host waiting for the device
        "copies_per_unit": sum(e.count for e in events if e.key.startswith("cudaMemcpy")) / max(units, 1),
        "device_busy_ms_per_unit": kernels_ms / 1000 / max(units, 1),
    }


class TraceOnce(Callback):
    """torch.profiler over ``updates`` training updates from update ``after``, then over the next whole
    validation epoch; writes ``trace.json`` (:func:`trace_summary` of each) and ``trace_training.txt``,
    ``trace_validation.txt`` (the operators by host time, and by device time on a GPU) into the run folder."""

    def __init__(self, after: int, updates: int = TRACED_UPDATES) -> None:
        self.after, self.updates = after, updates
        self.state, self.profile, self.started, self.first, self.batches = "wait", None, 0.0, 0, 0
        self.summaries: dict = {}

    def _start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profile = torch.profiler.profile(activities=activities)
        self.profile.__enter__()
        self.started = time.perf_counter()

    def _stop(self, trainer, part: str, units: int, unit: str) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - self.started
        self.profile.__exit__(None, None, None)
        folder = Path(trainer.default_root_dir)
        events = self.profile.key_averages()
        tables = [events.table(sort_by="self_cpu_time_total", row_limit=30)]
        if torch.cuda.is_available():
            try:
                tables.append(events.table(sort_by="self_device_time_total", row_limit=30))
            except (KeyError, AttributeError, ValueError):  # the older name of the column
                tables.append(events.table(sort_by="self_cuda_time_total", row_limit=30))
        (folder / f"trace_{part}.txt").write_text("\n\n".join(tables))
        self.summaries[part] = trace_summary(self.profile, seconds, units, unit)
        (folder / "trace.json").write_text(json.dumps(self.summaries, indent=1))
        self.profile = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.state == "wait" and trainer.global_step >= self.after and trainer.is_global_zero:
            self.state, self.first = "training", trainer.global_step
            self._start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self.state == "training" and trainer.global_step - self.first >= self.updates:
            self._stop(trainer, "training", trainer.global_step - self.first, "update")
            self.state = "wait validation"

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if self.state == "wait validation" and not trainer.sanity_checking:
            self.state, self.batches = "validation", 0
            self._start()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx=0) -> None:
        if self.state == "validation":
            self.batches += 1

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if self.state == "validation":
            self._stop(trainer, "validation", self.batches, "validation batch")
            self.state = "done"

    def on_train_end(self, trainer, pl_module) -> None:
        if self.profile is not None:  # training ended inside a traced stretch: keep what it holds
            self._stop(trainer, self.state, max(trainer.global_step - self.first, self.batches), "part")


def main() -> None:
    if sys.argv[1:2] != ["--after"] or len(sys.argv) < 3:
        raise SystemExit("usage: python -m benchmarks.profiled_train --after UPDATES [train.py overrides]")
    after = int(sys.argv[2])
    del sys.argv[1:3]
    build = trainer_module._callbacks
    trainer_module._callbacks = lambda *args, **kwargs: [
        *build(*args, **kwargs),
        ClearProfilerAfter(after),
        TraceOnce(after),
    ]
    script = ROOT / "train.py"
    sys.argv[0] = str(script)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
