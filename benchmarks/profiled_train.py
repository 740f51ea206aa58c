"""``python -m benchmarks.profiled_train --after N [train.py overrides]``: ``train.py`` with Lightning's simple
profiler (``+trainer.profiler=simple``) cleared after a warm-up of N updates, so that its report
(printed when ``fit`` ends) holds the steady state: the host's time per loop step and hook once compiling
and CUDA-graph recording are done, not their minutes spread over a few hundred updates."""

import runpy
import sys
from pathlib import Path

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


def main() -> None:
    if sys.argv[1:2] != ["--after"] or len(sys.argv) < 3:
        raise SystemExit("usage: python -m benchmarks.profiled_train --after UPDATES [train.py overrides]")
    after = int(sys.argv[2])
    del sys.argv[1:3]
    build = trainer_module._callbacks
    trainer_module._callbacks = lambda *args, **kwargs: [*build(*args, **kwargs), ClearProfilerAfter(after)]
    script = ROOT / "train.py"
    sys.argv[0] = str(script)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
