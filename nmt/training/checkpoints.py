"""Which checkpoints a run keeps, and how their state follows the run folder: best.ckpt (by the monitored
metric), last.ckpt between epochs, the epoch checkpoints for averaging. Lightning's ModelCheckpoint
underneath; the writing itself is :mod:`nmt.training.checkpoint_io`'s."""

import functools
import os
import shutil
from pathlib import Path

from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from nmt.training.checkpoint_io import (
    STEP_CHECKPOINT_KEY,
    AtomicCheckpointIO,
    best_checkpoint_key,
    full_disk_named,
)
from nmt.utils.io import atomic_path


class FolderCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, whose saved state follows the run folder: a run resumed in a moved or
    copied folder keeps its best score and the files it tracks, renamed into this folder (Lightning drops
    them when the folder's path changed, so the next validation would replace the best checkpoint with
    whatever it scored, and the epoch checkpoints kept would no longer be counted)."""

    def load_state_dict(self, state_dict: dict) -> None:
        before = state_dict.get("dirpath")
        if before and self.dirpath and os.path.normpath(before) != os.path.normpath(self.dirpath):
            state_dict = {**state_dict, "dirpath": self.dirpath}

            def moved(path):
                if (
                    isinstance(path, str)
                    and path
                    and os.path.dirname(os.path.normpath(path)) == os.path.normpath(before)
                ):
                    return os.path.join(self.dirpath, os.path.basename(path))
                return path

            for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
                if key in state_dict:
                    state_dict[key] = moved(state_dict[key])
            if "best_k_models" in state_dict:
                state_dict["best_k_models"] = {moved(k): v for k, v in state_dict["best_k_models"].items()}
        super().load_state_dict(state_dict)


class BestCheckpoint(FolderCheckpoint):
    """``best.ckpt``: Lightning's ModelCheckpoint on the monitored score, its state under
    :func:`best_checkpoint_key`."""

    @property
    def state_key(self) -> str:
        return best_checkpoint_key(self.monitor, self.mode)


class StepCheckpoint(FolderCheckpoint):
    """``last.ckpt`` every ``checkpoint.every_n_train_steps`` updates, its state under one key whatever N is;
    not on an epoch's last batch where that epoch's end writes ``last.ckpt`` (after its validation, where it
    has one): Lightning resumes a checkpoint of an epoch's last batch in the next epoch, never running the end
    of the one it holds, so a run killed between the two lost that epoch's validation, its epoch checkpoint
    and its end-of-epoch row, and trained on from another state than a run not killed. Where the epoch's end
    writes none (validation every few epochs, or every N updates), the step checkpoint is written: a kill
    before the end then loses that end's row alone (it has no validation to lose)."""

    @property
    def state_key(self) -> str:
        return STEP_CHECKPOINT_KEY

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch and _epoch_end_writes_last(trainer):
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def _epoch_end_writes_last(trainer) -> bool:
    """Whether the end of the epoch in progress writes ``last.ckpt`` (its epoch checkpoint and the copy): at
    the training epoch's end, or after a validation at the epoch's end, as Lightning's ModelCheckpoint
    decides for :class:`EpochCheckpoints`."""
    epochs = next((c for c in trainer.checkpoint_callbacks if isinstance(c, EpochCheckpoints)), None)
    if epochs is None:
        return False
    if epochs._should_save_on_train_epoch_end(trainer):
        return True
    if getattr(trainer, "_val_check_time_interval", None) is not None:
        # validation by the clock: the loop's decision, made again just after, may differ from one asked
        # here (and from another process's): the step checkpoint is written
        return False
    # else it saves after a validation: is there one after this batch (the loop's own decision, made next)?
    loop = trainer.fit_loop
    return trainer.enable_validation and loop.epoch_loop._should_check_val_fx(loop._data_fetcher)


class NoStepCheckpoint(Callback):
    """Holds the step checkpointer's key where ``checkpoint.every_n_train_steps`` is off, so that a run that had
    them resumes without them in silence (its saved state, the file last written, has nothing to restore)."""

    @property
    def state_key(self) -> str:
        return STEP_CHECKPOINT_KEY


class EpochCheckpoints(FolderCheckpoint):
    """Lightning's ModelCheckpoint for the most recent epochs, whose ``last.ckpt`` is a copy of the epoch
    checkpoint just written, made by the file system (Lightning's ``save_last="link"``, with a copy for
    the link): the state is gathered from the device, checked and serialised once an epoch, not twice.
    The copy is written atomically, as every checkpoint here, and is a file of its own, not a second name
    of the same one: a damaged ``last.ckpt`` leaves the epoch checkpoint to resume from
    (``checkpoint.resume_fallback``). Where the epoch checkpoint was not written (non-finite values),
    the previous ``last.ckpt`` stays."""

    def __init__(self, **kwargs) -> None:
        super().__init__(save_last="link", **kwargs)

    @staticmethod
    def _link_checkpoint(trainer, filepath: str, linkpath: str) -> None:
        try:
            if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
                writer = getattr(trainer.strategy, "checkpoint_io", None)
                # only a file this save wrote: an older one of the same name (an earlier sitting's) is not it
                written = getattr(writer, "last_written", None) == os.path.abspath(filepath)
                if written:  # after the write itself, which may still be queued
                    writer.then(functools.partial(_copy, filepath, linkpath))
                elif not isinstance(writer, AtomicCheckpointIO) and os.path.isfile(filepath):
                    _copy(filepath, linkpath)
        finally:
            trainer.strategy.barrier()


def _copy(source: str, target: str) -> None:
    with full_disk_named(Path(target)), atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)
