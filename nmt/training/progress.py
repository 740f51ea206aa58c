"""Progress for output that is not a terminal (a log file, a sweep, a cluster job): a plain line every few
seconds instead of a bar that a file cannot show."""

import builtins
import sys
import time

import lightning as L
from lightning.pytorch.callbacks import ProgressBar


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min" if minutes else f"{round(seconds)} s"


class PlainProgress(ProgressBar):
    """One line every ``every_s`` seconds of training: update (of max_steps), epoch, training loss,
    learning rate, target tokens per second, the last validation value of ``monitor`` and the ETA; and one
    line per validation. Flushed, so ``tail -f`` shows it as it happens."""

    def __init__(self, every_s: float = 30.0, monitor: str = "val_loss") -> None:
        super().__init__()
        self.every_s, self.monitor = float(every_s), monitor
        self._enabled = True
        self._last_time = self._start_time = 0.0
        self._last_step = self._start_step = 0
        self._last_tokens: float | None = None  # tokens trained on when the last line was printed
        self._earlier_tokens = 0.0  # of the epochs ended since training started

    @property
    def is_enabled(self) -> bool:  # read by LightningModule.print, which then prints through the bar
        return self._enabled

    def print(self, *args, **kwargs) -> None:
        """A line of the module's (a skipped batch's warning), flushed as this bar's own lines are."""
        builtins.print(*args, **{"flush": True, **kwargs})

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_time = self._start_time = time.monotonic()
        self._last_step = self._start_step = trainer.global_step
        self._last_tokens, self._earlier_tokens = None, 0.0

    @staticmethod
    def _epoch_tokens(pl_module: L.LightningModule) -> float:
        counted = getattr(pl_module, "epoch_tokens_so_far", None)  # the module's count of the epoch so far
        return counted() if counted is not None else 0.0

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # callbacks run before the module's own hook, which resets the epoch's count: keep its total, so that
        # a line whose interval spans epochs (short epochs on a GPU) counts every token of it
        if self._enabled and trainer.is_global_zero and self._last_tokens is not None:
            self._earlier_tokens += self._epoch_tokens(pl_module)

    def _planned_steps(self, trainer: L.Trainer) -> int | None:
        if trainer.max_steps and trainer.max_steps > 0:
            return trainer.max_steps
        if trainer.max_epochs and trainer.max_epochs > 0 and trainer.num_training_batches != float("inf"):
            return int(trainer.max_epochs * trainer.num_training_batches // max(trainer.accumulate_grad_batches, 1))
        return None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        if not (self._enabled and trainer.is_global_zero):
            return
        if self._last_tokens is None:
            # the first batch after the start: the baseline (a resumed run restores its epoch's count only
            # at that batch's start, and those tokens were not trained on in this sitting)
            self._last_time, self._last_tokens = now, self._epoch_tokens(pl_module)
            return
        if now - self._last_time < self.every_s:
            return
        tokens = self._earlier_tokens + self._epoch_tokens(pl_module)
        step, metrics = trainer.global_step, trainer.callback_metrics
        speed = (tokens - self._last_tokens) / max(now - self._last_time, 1e-9)
        planned = self._planned_steps(trainer)
        parts = [f"[train] update {step}" + (f"/{planned}" if planned else "")]
        parts.append(f"epoch {trainer.current_epoch}")
        # the last update's own values where the module keeps them (it logs them only where they are read)
        scalars = getattr(pl_module, "update_scalars", None)
        latest = scalars.latest() if scalars is not None else {}
        for name, fmt in (("train_loss", "loss {:.4f}"), ("lr", "lr {:.3g}")):
            if name in latest or name in metrics:
                parts.append(fmt.format(latest[name] if name in latest else float(metrics[name])))
        processes = max(int(getattr(trainer, "world_size", 1) or 1), 1)
        if processes > 1:  # the count is this process's (a sum over all would wait for the others)
            parts.append(f"{speed * processes:,.0f} tokens/s (this process's x {processes})")
        else:
            parts.append(f"{speed:,.0f} tokens/s")
        if self.monitor in metrics:
            parts.append(f"{self.monitor} {float(metrics[self.monitor]):.4f}")
        if planned and step > self._start_step:
            seconds = (now - self._start_time) / (step - self._start_step) * (planned - step)
            parts.append(f"ETA {_duration(seconds)}")
        print(", ".join(parts), flush=True)
        self._last_time, self._last_step, self._last_tokens = now, step, tokens

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._enabled:
            validation_line(trainer, pl_module)


class ValidationLines(L.Callback):
    """The ``[valid]`` line of each validation, without a progress bar (``trainer.enable_progress_bar=false``:
    a validation's scores are a result, not progress)."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        validation_line(trainer, pl_module)


def validation_line(trainer: L.Trainer, pl_module: L.LightningModule) -> None:
    """``[valid] update N, epoch E: val_... `` (the first process's, not the sanity check's), flushed."""
    if not trainer.is_global_zero or trainer.sanity_checking:
        return
    values = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
    shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(values.items()))
    # after fit the epoch counter has moved past the last epoch trained: the final weights are named so
    where = "the final weights" if getattr(pl_module, "final_validation", False) else f"epoch {trainer.current_epoch}"
    print(f"[valid] update {trainer.global_step}, {where}: {shown}", flush=True)


def plain_output() -> bool:
    """Whether standard output is a file or a pipe rather than a terminal."""
    return not sys.stdout.isatty()
