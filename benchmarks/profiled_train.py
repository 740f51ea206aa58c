"""``python -m benchmarks.profiled_train --after N [--trace] [train.py overrides]``: ``train.py`` with
Lightning's simple profiler (``+trainer.profiler=simple``) cleared after a warm-up of N updates, so that its report
(printed when ``fit`` ends) holds the steady state: the host's time per loop step and hook once compiling
and CUDA-graph recording are done, not their minutes spread over a few hundred updates.

With ``--trace``, PyTorch's profiler first traces :data:`TRACED_UPDATES` updates after the warm-up and then
the next validation epoch, op by op (:class:`TraceOnce`): what the host spends its time on inside a step
(operator calls, kernel launches, waits for the device) and how long the device was busy, which the
loop-level report cannot say. The simple profiler is then cleared once the trace is done, so that the
tracing's own cost stays out of its report."""

import json
import runpy
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback

from benchmarks.options import run_main
from nmt.training import trainer as trainer_module

ROOT = Path(__file__).resolve().parents[1]


class ClearProfilerAfter(Callback):
    """Forget every duration recorded before update ``after`` (once), or, with ``trace``, before the end
    of that trace, whichever comes later; the update it cleared at goes into the trace's summary."""

    def __init__(self, after: int, trace: "TraceOnce | None" = None) -> None:
        self.after, self.trace, self.done = after, trace, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        recorded = getattr(trainer.profiler, "recorded_durations", None)  # the simple profiler's
        traced = self.trace is None or self.trace.state == "done"
        if not self.done and traced and trainer.global_step >= self.after and recorded is not None:
            recorded.clear()  # actions in progress (the epoch, this batch) still record when they end
            self.done = True
            if self.trace is not None:
                self.trace.note(trainer, simple_profiler_cleared_at_update=trainer.global_step)


TRACED_UPDATES = 20
TOP_EVENTS = 15  # kernels and host operators listed in a trace's summary


def trace_summary(profile, seconds: float, units: int, unit: str) -> dict:
    """Sums over a torch.profiler trace of ``units`` updates or validation batches that took ``seconds``."""
    events = profile.key_averages()

    def calls(*names: str) -> int:
        return sum(e.count for e in events if e.key in names)

    def self_host_ms(word: str) -> float:
        return sum(e.self_cpu_time_total for e in events if word in e.key) / 1000

    # kernels and copies only: a range named on the host (``Optimizer.step#AdamW.step``, which in Lightning
    # holds the whole forward and backward) is listed on the device too, spanning its kernels, and counted
    # twice it made the device look busy for longer than the update took
    on_device = [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    ]
    kernels_ms = sum(getattr(e, "self_device_time_total", 0) for e in on_device)

    def top(rows, time_of, unit_ms: str) -> list[dict]:
        """The TOP_EVENTS of ``rows`` with the most time (µs from the profiler), per unit."""
        ranked = sorted(rows, key=time_of, reverse=True)[:TOP_EVENTS]
        return [
            {"name": e.key[:120], "calls_per_unit": e.count / max(units, 1), unit_ms: time_of(e) / 1000 / max(units, 1)}
            for e in ranked
        ]

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
        # which kernels the device time is (a graph's kernels are listed one by one), and which operators the
        # host's: what a summary's totals alone cannot say
        "top_kernels": top(on_device, lambda e: getattr(e, "self_device_time_total", 0), "device_ms_per_unit"),
        "top_host_operators": top(
            [e for e in events if e.device_type == torch.autograd.DeviceType.CPU],
            lambda e: e.self_cpu_time_total,
            "host_ms_per_unit",
        ),
    }


class TraceOnce(Callback):
    """torch.profiler over ``updates`` training updates from update ``after`` (fewer when a validation comes
    first), then over the next whole validation epoch; writes ``trace.json`` (:func:`trace_summary` of each)
    and ``trace_training.txt``, ``trace_validation.txt`` (the operators by host time, and by device time on a
    GPU) into the run folder."""

    def __init__(self, after: int, updates: int = TRACED_UPDATES) -> None:
        self.after, self.updates = after, updates
        self.state, self.profile, self.started, self.first, self.batches = "wait", None, 0.0, 0, 0
        self.summaries: dict = {}

    def setup(self, trainer, pl_module, stage: str) -> None:
        init = getattr(torch.profiler._utils, "_init_for_cuda_graphs", None)
        if torch.cuda.is_available() and init is not None:
            init()  # torch's own step before tracing a process that records CUDA graphs (compile=reduce-overhead)

    def note(self, trainer, **facts) -> None:
        self.summaries.update(facts)
        (Path(trainer.default_root_dir) / "trace.json").write_text(json.dumps(self.summaries, indent=1))

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
        events = self.profile.key_averages()
        tables = [events.table(sort_by="self_cpu_time_total", row_limit=30)]
        if torch.cuda.is_available():
            tables.append(events.table(sort_by="self_device_time_total", row_limit=30))
        (Path(trainer.default_root_dir) / f"trace_{part}.txt").write_text("\n\n".join(tables))
        summary = trace_summary(self.profile, seconds, units, unit)
        self.profile = None
        self.note(trainer, **{part: summary})

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.state == "wait" and trainer.global_step >= self.after and trainer.is_global_zero:
            self.state, self.first = "training", trainer.global_step
            self._start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self.state == "training" and trainer.global_step - self.first >= self.updates:
            self._stop(trainer, "training", trainer.global_step - self.first, "update")
            self.state = "wait validation"

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        if self.state == "training":  # an epoch ended inside the window: its updates alone, not the validation
            self._stop(trainer, "training", trainer.global_step - self.first, "update")
            self.state = "wait validation"
        if self.state == "wait validation":
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
        if self.state == "training":  # training ended inside the window: keep what it holds
            self._stop(trainer, "training", trainer.global_step - self.first, "update")
        elif self.state == "validation":
            self._stop(trainer, "validation", self.batches, "validation batch")
        self.state = "done"


def main() -> None:
    usage = (
        "usage: python -m benchmarks.profiled_train --after UPDATES [--trace] [train.py overrides] (the report "
        "needs +trainer.profiler=simple among them; without it the run is timed alone)"
    )
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(f"{usage}\n\n{__doc__}")
        return
    if sys.argv[1:2] != ["--after"] or len(sys.argv) < 3:
        raise SystemExit(usage)
    if not sys.argv[2].isdigit():
        raise SystemExit(f"error: --after {sys.argv[2]}: a number of updates (the warm-up the report leaves out)")
    after = int(sys.argv[2])
    trace = TraceOnce(after) if sys.argv[3:4] == ["--trace"] else None
    del sys.argv[1 : 4 if trace else 3]
    build = trainer_module._callbacks
    ours = [ClearProfilerAfter(after, trace), *([trace] if trace else [])]
    trainer_module._callbacks = lambda *args, **kwargs: [*build(*args, **kwargs), *ours]
    script = ROOT / "train.py"
    sys.argv[0] = str(script)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    run_main(main)
