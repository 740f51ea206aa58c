"""Callbacks that keep a run's work when the process is told to stop."""

import signal
from pathlib import Path

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException


class SaveOnSignal(Callback):
    """SIGTERM or SIGUSR1 (the preemption warnings of clusters): finish the current batch, write
    ``last.ckpt`` (atomically) and stop; running the same command again resumes from it.

    Lightning turns SIGTERM into a SIGTERMException after the batch; SIGUSR1 is routed the same way.
    Under SLURM with auto-requeue, Lightning's own SIGUSR1 handler saves and requeues the job instead.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.saved = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        environment = trainer._accelerator_connector.cluster_environment
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            return

        def request_stop(signum, frame) -> None:
            trainer._signal_connector.received_sigterm = True

        signal.signal(signal.SIGUSR1, request_stop)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.path)
            self.saved = True
