"""Callbacks: keep a run's work when the process is told to stop; measure its wall time and throughput."""

import copy
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback, EarlyStopping, ThroughputMonitor, Timer
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only, rank_zero_warn

from nmt.training.checkpoint_io import AtomicCheckpointIO
from nmt.training.loggers import ResumableCSVLogger, ResumableTensorBoardLogger


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
    and :func:`what_ended` must not take the old decision for what ended the new sitting."""

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


class ResumeLogs(Callback):
    """A run that starts from scratch in a folder that already has a CSV log (loggers.ResumableCSVLogger)
    starts a new log; a resumed run keeps it (the logger drops the rows that training is about to redo).
    TensorBoard's (loggers.ResumableTensorBoardLogger) likewise deletes the earlier runs' event files, or
    hides the events of earlier sittings from the resumed sitting's first logged step on."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, ResumableCSVLogger) and trainer.global_step == 0:
                logger.experiment.drop_rows_from(0)
            if isinstance(logger, ResumableTensorBoardLogger):
                if trainer.global_step == 0:
                    logger.drop_earlier()
                else:
                    logger.purge_at_next_log = True


class DataPlaceError(ValueError):
    """A resumed run whose settings put it elsewhere in the data than where its checkpoint stopped."""


class SamePlaceInData(Callback):
    """A resumed run's training loader finds its place from the count of batches trained, so settings that
    change an epoch's batches (the number of processes, which ``trainer.devices=auto`` counts on each
    machine; ``data.max_tokens``; the corpus) would put it elsewhere in the data order than its checkpoint
    stopped (``module.saved_data_place``), and Lightning, which keeps its own epoch count, would end an epoch
    early without its validation. So would settings that reorder an epoch's batches (the seed, the
    corpus's sentences) for a run resumed mid-epoch: the rest of that epoch would train some sentences twice
    and skip others. Refused before the first update, in one line."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        saved = getattr(pl_module, "saved_data_place", None)
        position = getattr(trainer.train_dataloader, "position", None)
        if saved is None or position is None:
            return
        if position() == saved:
            self._same_order(trainer, pl_module, *saved)
            return

        def place(epoch: int, done: int) -> str:
            return f"at the start of epoch {epoch}" if done == 0 else f"{done} batches into epoch {epoch}"

        raise DataPlaceError(
            f"the checkpoint stopped {place(*saved)}; under this run's settings (an epoch of "
            f"{trainer.train_dataloader.epoch_length()} batches per process) the batches it trained end "
            f"{place(*position())}, so the run cannot go on where it stopped in the data: keep the settings that "
            "make an epoch's batches (the number of processes, trainer.devices=auto counting this machine's GPUs; "
            "data.max_tokens; the corpus) as they were, or train anew"
        )

    @staticmethod
    def _same_order(trainer: L.Trainer, pl_module: L.LightningModule, epoch: int, done: int) -> None:
        saved = getattr(pl_module, "saved_data_order", None)
        digest = getattr(trainer.train_dataloader, "order_digest", None)
        if done == 0 or saved is None or digest is None or digest(epoch) == saved:
            return  # at an epoch's start any order is a whole epoch's
        start = (
            f"resume with the run's own settings to the epoch's end, or continue under these from the checkpoint of "
            f"the epoch before (ckpt_path=<run_dir>/checkpoints/epoch{epoch - 1:03d}.ckpt)"
            if epoch > 0
            else "resume with the run's own settings to the epoch's end, or train anew"
        )
        raise DataPlaceError(
            f"the checkpoint stopped {done} batches into epoch {epoch}, and under this run's settings that epoch's "
            "batches come in another order (the seed, the training sentences, or another torch's random numbers): "
            f"the rest of the epoch would train some sentences twice and skip others; {start}"
        )


class WallClock(Callback):
    """Logs ``wall_time_s``: seconds since training started, summed over resumed runs, at every validation
    (with the step), so that learning curves can be drawn against time. Validation time is included:
    it is part of what a run costs."""

    def __init__(self) -> None:
        self.elapsed_before = 0.0  # seconds spent by earlier (killed and resumed) processes of this run
        self.started: float | None = None

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.started if self.started is not None else 0.0)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = time.monotonic()

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # a sitting resumed at training's end trains nothing: its final weights' validation is timed on top
        # of the earlier sittings' (its row had no time, so the curves left it out)
        if self.started is None and not trainer.sanity_checking and getattr(pl_module, "final_validation", False):
            self.started = time.monotonic()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking and self.started is not None:
            pl_module.log("wall_time_s", self.elapsed(), sync_dist=False)

    def state_dict(self) -> dict:
        return {"elapsed": self.elapsed()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.elapsed_before = float(state_dict.get("elapsed", 0.0))


TOTALS = ("time", "batches", "samples", "lengths")  # what Throughput logs counted from the run's start


class Throughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor (train/device/items_per_sec: target tokens per second), which on a GPU
    synchronises with the device only at the updates whose rates it logs (every trainer.log_every_n_steps),
    before a validation and when a checkpoint is saved, not after every batch: each synchronisation makes
    the host wait, so it could never queue the next update while the device works. In between, batch sizes
    are summed on the host (the task counts them without reading the device), and the rates are differences
    of totals over the last ``windows`` timed points. On a CPU, where waiting costs nothing, every batch is
    timed as in Lightning's."""

    def __init__(
        self, batch_size_fn, length_fn, window_size: int = 20, windows: int = 3, sparse: bool | None = None
    ) -> None:
        super().__init__(batch_size_fn=batch_size_fn, length_fn=length_fn, window_size=window_size)
        self.windows = windows
        self.sparse_setting = sparse  # None: on a GPU
        self.sparse = False
        # the totals logged (train/time, train/batches, ...) up to the checkpoint this sitting resumed from:
        # they go on across sittings, as the run's log does, rather than start again from 0
        self.before = dict.fromkeys(TOTALS, 0)
        self._trainer = None

    def _totals(self) -> dict:
        stage = RunningStage.TRAINING
        times = self._throughputs[stage]._time if stage in self._throughputs else ()
        # the time of the last update timed (on a GPU, of the last timed point: state_dict times the updates
        # since, so that a checkpoint's time covers every update it counts)
        now = {
            "time": times[-1] if times else 0.0,
            "batches": self._batches.get(stage, 0),
            "samples": self._samples.get(stage, 0),
            "lengths": self._lengths.get(stage, 0),
        }
        return {key: self.before[key] + now[key] for key in TOTALS}

    def state_dict(self) -> dict:
        trainer = self._trainer
        if self.sparse and trainer is not None and trainer.state.stage == RunningStage.TRAINING:
            self._time_training(trainer)  # a step checkpoint or a signal's save between logged updates
        return self._totals()

    def load_state_dict(self, state_dict: dict) -> None:
        self.before = {key: state_dict.get(key, 0) for key in TOTALS}

    def _compute(self, trainer, iter_num: int | None = None) -> None:
        # Lightning's, with the earlier sittings' totals added to this one's
        if not trainer._logger_connector.should_update_logs:
            return
        stage = trainer.state.stage
        if stage != RunningStage.TRAINING:
            # Lightning logs a validation's rate at the validation's own batch index as the step: rows at steps
            # 2, 4, ... after update 37's, out of order in metrics.csv; only training's rate is read
            return
        throughput = self._throughputs[stage]
        metrics = throughput.compute()
        metrics.update({key: self.before[key] + metrics[key] for key in TOTALS if key in metrics})
        metrics = {f"{stage.value}{throughput.separator}{key}": value for key, value in metrics.items()}
        trainer._logger_connector.log_metrics(metrics, step=iter_num)

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._trainer = trainer  # for state_dict, which Lightning calls without it
        on_gpu = trainer.strategy.root_device.type == "cuda"
        self.sparse = on_gpu if self.sparse_setting is None else self.sparse_setting
        if self.sparse:
            self.kwargs["window_size"] = self.windows
        super().setup(trainer, pl_module, stage)

    @rank_zero_only
    def on_validation_start(self, trainer, *args) -> None:
        # Lightning takes the last timed update as training's end and moves the training clock past the
        # validation from there: timed only at logged updates, those after the last one would drop out of
        # the clock (their batches counted, their time not), and a window spanning a validation would read
        # up to twice as fast as training ran. So training is timed here too, once its updates have run.
        if self.sparse and not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING:
            self._time_training(trainer)
        super().on_validation_start(trainer, *args)

    def _time_training(self, trainer) -> None:
        """A timing point for training at its last update (after the device has run it), where updates
        were counted since the last one."""
        stage = RunningStage.TRAINING
        throughput = self._throughputs.get(stage)
        if (
            throughput is None
            or not self._batches.get(stage)
            or (throughput._batches or [0])[-1] == self._batches[stage]
        ):
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()
        throughput.update(
            time=time.perf_counter() - self._t0s[stage],
            batches=self._batches[stage],
            samples=self._samples[stage],
            lengths=None if self.length_fn is None else self._lengths[stage],
        )

    def _update(self, trainer, pl_module, batch, iter_num: int) -> None:
        stage = trainer.state.stage
        if self.sparse and stage == RunningStage.TRAINING and not trainer._logger_connector.should_update_logs:
            if self.length_fn is not None:
                self._lengths[stage] += self.length_fn(batch)
            self._samples[stage] += self.batch_size_fn(batch)
            self._batches[stage] += 1
            return
        super()._update(trainer, pl_module, batch, iter_num)
