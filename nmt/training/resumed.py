"""A resumed sitting as its training starts: its place in the data checked against where its checkpoint
stopped, and its logs continued (or started anew for a run from scratch)."""

import lightning as L
from lightning.pytorch.callbacks import Callback

from nmt.training.loggers import ResumableCSVLogger, ResumableTensorBoardLogger


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
