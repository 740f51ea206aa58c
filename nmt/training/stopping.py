"""How a sitting ends: its work kept when the process is told to stop (the loops' counters saved as a resumed
run must find them), early stopping that belongs to its sitting, and what ended it. The trainer's other
callbacks (each listed where :func:`nmt.training.trainer.build_trainer` adds it): checkpoints
(:mod:`~nmt.training.checkpoints`, :mod:`~nmt.training.checkpoint_io`), wall time and throughput
(:mod:`~nmt.training.timing`), a resumed sitting's checks (:mod:`~nmt.training.resume`), progress
(:mod:`~nmt.training.progress`)."""

import copy
import signal
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback, EarlyStopping, Timer
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from nmt.training.checkpoint_io import AtomicCheckpointIO


class SaveOnSignal(Callback):
    """SIGTERM or SIGUSR1 (the preemption warnings of clusters), or a first Ctrl-C (SIGINT): stop at the next
    point where the state can be saved whole, write ``last.ckpt`` (atomically) and stop; running the same
    command again resumes from it. A second Ctrl-C interrupts at once, as Ctrl-C usually does.

    The handlers only note the signal; it takes effect at the start of the next batch that ends an update
    (Lightning stops after that batch: no gradient of a partial accumulation is lost, and no validation has
    started), or at the epoch's end when the epoch's last batch comes first. Lightning, told at once, would
    stop in the middle of a validation that follows the batch, and resume without redoing it. A stop at an
    epoch's end is saved as the next epoch's start (see ``_start_next_epoch``); one that comes as training
    ends (a limit reached, early stopping) is reported, and the final scores follow. Under SLURM with
    auto-requeue, Lightning's own SIGUSR1 handler saves and requeues the job instead.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.saved = False
        self.deferred: list[int] = []  # signals noted, acted on at the next point where a stop is safe
        self.epoch_ended = False  # between an epoch's end hooks and the next epoch's first batch
        self.cut_short = False  # in the end hooks of an epoch that max_steps or a stop cut short

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        def note(signum, frame) -> None:
            trainer.nmt_stop_signal = signal.Signals(signum).name  # train() says which stopped the run
            self.deferred.append(signum)

        # not Lightning's SIGTERM handler: it runs a collective of the process group from inside the handler,
        # which waits for ever when the other processes are at another collective at that moment
        signal.signal(signal.SIGTERM, note)
        environment = trainer._accelerator_connector.cluster_environment
        if not (isinstance(environment, SLURMEnvironment) and environment.auto_requeue):
            signal.signal(signal.SIGUSR1, note)

        def first_interrupt(signum, frame) -> None:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops at once
            print("\nCtrl-C: stopping after the next update (or at this epoch's end) and saving last.ckpt "
                  "(Ctrl-C again to stop at once)")  # fmt: skip
            note(signum, frame)

        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # the main thread of a program
            signal.signal(signal.SIGINT, first_interrupt)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.epoch_ended = self.cut_short = False  # the final weights' best.ckpt, saved after this, is no epoch's end
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.deferred and trainer.is_global_zero:  # it came after the last epoch's end hooks
            names = ", ".join(sorted({signal.Signals(signum).name for signum in self.deferred}))
            print(f"{names} arrived as training ended: the final scores follow (Ctrl-C stops them at once)")
        self.deferred = []

    def _act(self, trainer: L.Trainer) -> None:
        # every process of a multi-process run stops after the same batch, or they wait for each other for
        # ever: a signal noted by any one of them (a cluster signals them at different moments) stops all
        if trainer.strategy.reduce_boolean_decision(bool(self.deferred), all=False):
            self.deferred = []
            trainer._signal_connector.received_sigterm = True  # Lightning stops after this batch

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.epoch_ended = False
        # Lightning stops after the batch in which it learns of the signal: this one ends an update, and
        # unless it is the epoch's last, no validation follows it within the batch
        ends_update = (batch_idx + 1) % trainer.accumulate_grad_batches == 0
        if ends_update and batch_idx + 1 < trainer.num_training_batches and not _training_ends(trainer, 1):
            self._act(trainer)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.epoch_ended = self.cut_short = False

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # an epoch that max_steps (or a stop) cut short has not ended: its checkpoints resume inside it (as
        # the next epoch's start, an extended run skipped the epoch's rest, its validation and its data)
        self.epoch_ended = bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)
        self.cut_short = not self.epoch_ended
        if not _training_ends(trainer):
            self._act(trainer)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        # a save at an epoch's end (the epoch checkpoints, last.ckpt) is the next epoch's start to resume from
        if self.epoch_ended and "fit_loop" in checkpoint.get("loops", {}):
            checkpoint["loops"]["fit_loop"] = as_next_epoch_start(trainer, checkpoint["loops"]["fit_loop"])
        elif self.cut_short and "fit_loop" in checkpoint.get("loops", {}):
            checkpoint["loops"]["fit_loop"] = as_inside_epoch(checkpoint["loops"]["fit_loop"])

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if isinstance(exception, SIGTERMException):
            if self.epoch_ended:  # Lightning raises after an epoch's end hooks
                _start_next_epoch(trainer)
                self.epoch_ended = False  # the live state is the next epoch's start now (on_save_checkpoint)
            writer = trainer.strategy.checkpoint_io
            if isinstance(writer, AtomicCheckpointIO):  # on disk before the barrier that lets the other ranks exit
                writer.background = False
                try:  # an earlier write that failed must not stop this save, the state to resume from
                    writer.wait()
                except Exception as err:  # noqa: BLE001 - named, and the save below tells whether the disk is full
                    rank_zero_warn(f"an earlier checkpoint write failed: {err}")
            trainer.save_checkpoint(self.path, weights_only=False)  # the whole state: a rerun resumes it
            self.saved = True


def _training_ends(trainer: L.Trainer, updates_to_come: int = 0) -> bool:
    """Whether Lightning ends training after ``updates_to_come`` more updates: a limit reached, or early
    stopping, whose decision a checkpoint does not keep (a stop saved there would resume and train on)."""
    loop = trainer.fit_loop
    steps = loop.max_steps != -1 and trainer.global_step + updates_to_come >= loop.max_steps
    epochs = loop.max_epochs not in (None, -1) and loop.epoch_progress.current.processed >= loop.max_epochs
    return steps or epochs or (trainer.should_stop and loop._can_stop_early)


def what_ended(trainer: L.Trainer) -> str:
    """What ended a training that ran to its end: "early stopping", "max_steps", "max_epochs" or "max_time"
    (``trainer.max_time``, a cap on the time, not the recipe's stopping rule); "unknown" when none says so."""
    loop = trainer.fit_loop
    # should_stop: early stopping decided in this sitting (its state, restored on resume, may be older)
    if trainer.should_stop and any(_stopped_early(c) for c in trainer.callbacks if isinstance(c, EarlyStopping)):
        return "early stopping"
    if loop.max_steps not in (None, -1) and trainer.global_step >= loop.max_steps:
        return "max_steps"
    # an epoch cut short (by the time cap) counts as processed too: max_epochs only when the last one ran whole
    # (or a checkpoint saved at its end was resumed: the next epoch's start, no batch of it begun)
    progress = loop.epoch_loop.batch_progress
    resumed_at_end = progress.current.ready == 0 and loop.epoch_progress.current.completed >= (loop.max_epochs or 0)
    whole = progress.is_last_batch or resumed_at_end
    if loop.max_epochs not in (None, -1) and loop.epoch_progress.current.processed >= loop.max_epochs and whole:
        return "max_epochs"
    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]
    if any(t.time_remaining("train") is not None and t.time_remaining("train") <= 0 for t in timers):
        return "max_time"
    return "unknown"


class SittingEarlyStopping(EarlyStopping):
    """Lightning's early stopping, whose decision belongs to the sitting that made it: a checkpoint keeps the
    decision (saved after the validation that made it) but not the stop, so a run resumed from it trains on,
    and :func:`what_ended` must not take the old decision for what ended the new sitting.

    ``warmup``: the updates of the learning-rate schedule's warm-up (0: none). With ``after_warmup``, the
    validations made before it ends neither count toward the patience nor set the best score (a finite one:
    a diverged run still stops), so a long warm-up is not cut before its rate has risen; without it, a stop
    inside the warm-up is said in one warning, with the setting that avoids it."""

    def __init__(self, *args, warmup: int = 0, after_warmup: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.warmup, self.after_warmup = int(warmup or 0), after_warmup

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        current = trainer.callback_metrics.get(self.monitor)
        finite = current is None or bool(torch.as_tensor(current).isfinite().all())
        if self.after_warmup and trainer.global_step < self.warmup and finite:
            return
        stopping = trainer.should_stop
        super().on_validation_end(trainer, pl_module)
        # the patience spent inside the warm-up (a score that is not finite stops a run whatever the setting)
        patience = getattr(getattr(self, "stopping_reason", None), "name", "PATIENCE_EXHAUSTED") == "PATIENCE_EXHAUSTED"
        spent = trainer.should_stop and not stopping and _stopped_early(self) and patience
        if spent and not self.after_warmup and trainer.global_step < self.warmup:
            rank_zero_warn(
                f"early stopping ended this run at update {trainer.global_step}, inside its warm-up of "
                f"{self.warmup} updates (its learning rate had not reached its peak): early_stopping.after_warmup"
                "=true counts the patience from the warm-up's end"
            )

    @property
    def state_key(self) -> str:
        # Lightning's own key: checkpoints saved with EarlyStopping restore into this class, and back
        return f"EarlyStopping{repr({'monitor': self.monitor, 'mode': self.mode})}"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        if hasattr(self, "stopping_reason"):
            self.stopping_reason = type(self.stopping_reason)["NOT_STOPPED"]
        self.stopped_epoch = 0


def _stopped_early(callback: EarlyStopping) -> bool:
    reason = getattr(callback, "stopping_reason", None)  # newer Lightning: also a stop in epoch 0
    if reason is not None:
        return reason.name != "NOT_STOPPED"
    return callback.stopped_epoch > 0


def _start_next_epoch(trainer: L.Trainer, loop=None) -> None:
    """Resets the per-epoch counters as the next epoch's start would (of ``loop``, the fit loop's epoch loop
    by default). Saved as they are, the finished epoch's counters make a resumed Lightning take the next
    epoch for finished too: it ends with no batch trained, validates the same weights again (a step of early
    stopping's patience) and counts an epoch."""
    loop = trainer.fit_loop.epoch_loop if loop is None else loop
    loop.batch_progress.reset_on_run()
    loop.scheduler_progress.reset_on_run()
    loop.automatic_optimization.optim_progress.reset_on_run()
    loop.val_loop.batch_progress.total.reset()
    # a run bounded by max_steps restarts (Lightning's fit loop restarts a finished epoch only then), and a
    # restarted Lightning that finds the epoch's validation done counts one more logging step as it skips it,
    # assuming the save came before the last batch's count (as a save in a batch's hooks does); this one came
    # after it. An epoch that ended without a validation is restarted without that count.
    validated = getattr(trainer.lightning_module, "last_validated_step", None) == trainer.global_step
    if trainer.max_steps != -1 and validated:
        loop._batches_that_stepped -= 1


def as_inside_epoch(fit_loop_state: dict) -> dict:
    """The fit loop's saved state of a save in the end hooks of an epoch that max_steps (or a stop) cut short,
    as a save at its last update would be: Lightning counts the epoch processed before those hooks, and a
    run extended from there (a larger max_steps, resume=force) took the rest of the epoch as done."""
    state = dict(fit_loop_state)
    progress = copy.deepcopy(state["epoch_progress"])
    for part in ("total", "current"):
        if progress[part]["processed"] > progress[part]["completed"]:
            progress[part]["processed"] -= 1
    state["epoch_progress"] = progress
    return state


def as_next_epoch_start(trainer: L.Trainer, fit_loop_state: dict) -> dict:
    """The fit loop's saved state (``checkpoint["loops"]["fit_loop"]``) of a save at an epoch's end, as
    :func:`_start_next_epoch` would leave it, the live loop untouched: a checkpoint saved at an epoch's end
    (the epoch checkpoints, last.ckpt) resumes at the next epoch's start."""
    loop = trainer.fit_loop.epoch_loop
    parts = {
        "batch_progress": loop.batch_progress,
        "scheduler_progress": loop.scheduler_progress,
        "automatic_optimization.optim_progress": loop.automatic_optimization.optim_progress,
    }
    copies = {name: copy.deepcopy(part) for name, part in parts.items()}
    val_progress = copy.deepcopy(loop.val_loop.batch_progress)
    stand_in = SimpleNamespace(
        batch_progress=copies["batch_progress"],
        scheduler_progress=copies["scheduler_progress"],
        automatic_optimization=SimpleNamespace(optim_progress=copies["automatic_optimization.optim_progress"]),
        val_loop=SimpleNamespace(batch_progress=val_progress),
        _batches_that_stepped=loop._batches_that_stepped,
    )
    _start_next_epoch(trainer, stand_in)
    state = dict(fit_loop_state)
    for name, part in copies.items():
        state[f"epoch_loop.{name}"] = part.state_dict()
    state["epoch_loop.val_loop.batch_progress"] = val_progress.state_dict()
    state["epoch_loop.state_dict"] = {
        **state["epoch_loop.state_dict"],
        "_batches_that_stepped": stand_in._batches_that_stepped,
    }
    # the epoch counted as completed, as Lightning counts it right after its end hooks (a signal's save comes then)
    epochs = copy.deepcopy(trainer.fit_loop.epoch_progress)
    if epochs.current.completed < epochs.current.processed:
        epochs.increment_completed()
    state["epoch_progress"] = epochs.state_dict()
    return state
