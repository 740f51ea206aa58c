"""What a run's time goes to: its wall time (summed over its sittings, validation included) and its
throughput (updates, samples and tokens a second, and their totals since the run's start)."""

import time

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage, TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_only


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
