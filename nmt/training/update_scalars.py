"""The scalars of a training update (``train_loss``, ``grad_norm``, ``lr``), logged where they are read.

Each ``self.log`` costs the host a fraction of a millisecond (Lightning's bookkeeping, a copy of a Python
number to the device), a share of a small model's update on a GPU, while the loggers write these values
only every ``trainer.log_every_n_steps`` updates. So an update keeps its values (device tensors, nothing
read) and logs them at the end of its batch only when something will read them: the loggers, the end of
an epoch, a validation that follows (its callbacks see the training metrics), a stop (a time cap, early
stopping) and the run's last update, whose values ``results.json`` keeps. The progress bar shows the
last logged value.

When a callback watches one of them (``checkpoint.monitor=train_loss``: a checkpoint callback may read it
at any update, before the module's own end-of-batch hook), every update logs its loss and gradient norm as
it makes them (the rate still where it is read). A batch skipped for a non-finite loss or gradient makes no
values of its own: the last good update's stand.
"""

import torch

UPDATE_SCALARS = ("train_loss", "grad_norm", "lr")


class UpdateScalars:
    """Held by the training module; ``module`` is that LightningModule, whose ``log`` does the logging."""

    def __init__(self) -> None:
        self.every_update = False
        self.loss: torch.Tensor | None = None  # (deferred) the last batch's loss, on the device
        self.batch_size = 0  # its target tokens, counted on the host
        self.norm: torch.Tensor | None = None  # (deferred) the update's gradient norm, on the device
        self.lr: float | None = None  # the rate the update used (the schedule steps before the batch ends)
        self.logged: torch.Tensor | None = None  # the loss last logged (a skipped batch makes none)
        self._step, self._sum, self._parts = -1, None, 0  # the update being accumulated: its losses' sum and count

    def start(self, trainer) -> None:
        """At the start of training: whether a callback watches one of the scalars."""
        self.every_update = any(getattr(callback, "monitor", None) in UPDATE_SCALARS for callback in trainer.callbacks)

    def loss_made(self, module, loss: torch.Tensor, batch_size: int) -> None:
        """In the training step, once the loss is known to be kept. Under gradient accumulation an update's
        loss is the mean of its micro-batches' (the objective its gradient is of), not its last one's."""
        step = module.trainer.global_step  # the same for every micro-batch of one update
        if step == self._step and self._parts:
            self._sum, self._parts, self.batch_size = (
                self._sum + loss.detach(),
                self._parts + 1,
                self.batch_size + batch_size,
            )
        else:
            self._sum, self._parts, self.batch_size = loss.detach(), 1, batch_size
        self._step, self.norm = step, None
        self.loss = self._sum if self._parts == 1 else self._sum / self._parts
        loss = self.loss
        lr = module.optimizers().param_groups[0]["lr"]
        # a rate on the device (graph_updates) is filled in place by the schedule: this update's, copied
        self.lr = lr.detach().clone() if isinstance(lr, torch.Tensor) else lr
        if self.every_update:
            module.log("train_loss", loss, prog_bar=True, batch_size=batch_size, sync_dist=True)

    def norm_made(self, module, norm: torch.Tensor) -> None:
        """Before the optimiser's step, for an update whose gradient norm is logged (a finite one, or any
        under the deferred guard)."""
        self.norm = norm
        if self.every_update:
            module.log("grad_norm", norm, on_step=True, on_epoch=False)

    def latest(self) -> dict[str, float]:
        """The last update's values (one read of the device), for a progress line."""
        values = {"train_loss": self.loss, "lr": self.lr}
        return {name: float(value) for name, value in values.items() if value is not None}

    def batch_ended(self, module) -> None:
        """In the module's ``on_train_batch_end``, after the callbacks' (a time cap has set its stop by then).
        A batch skipped for a non-finite loss makes no values: the last good update's stand."""
        if self.loss is None or not read_next(module.trainer):
            return
        if not self.every_update and self.logged is not self.loss:
            self.logged = self.loss
            # the mean over processes (DDP's objective: each process's mean loss, their gradients averaged), not the
            # first process's half alone; every process logs at the same updates, so the reduction meets
            module.log("train_loss", self.loss, prog_bar=True, batch_size=self.batch_size, sync_dist=True)
            if self.norm is not None:
                module.log("grad_norm", self.norm, on_step=True, on_epoch=False)
        # in both modes only where read: a Python number is logged as a new device tensor, and that copy from
        # the host waits for the device
        module.log("lr", self.lr, on_step=True, on_epoch=False)


def read_next(trainer) -> bool:
    """Whether the values of the batch that just ended are read: the loggers write them (every
    ``log_every_n_steps`` updates, and when the run stops), the epoch ends, a validation follows, or this
    was the run's last update."""
    loop = trainer.fit_loop.epoch_loop
    validates = getattr(loop, "_should_check_val_fx", None)  # Lightning's own decision, without side effects
    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
    # a validation every so much time (val_check_interval as a duration) is decided on the clock, after this
    # hook: every update then logs
    timed_validation = getattr(trainer, "_val_check_time_interval", None) is not None
    return bool(
        timed_validation
        or trainer._logger_connector.should_update_logs
        or loop.batch_progress.is_last_batch
        or 0 < trainer.max_steps <= trainer.global_step
        or validates is None
        or fetcher is None
        or validates(fetcher)
    )
