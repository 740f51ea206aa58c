"""Writing checkpoints safely: whole or not at all, never with non-finite numbers, and a full disk named."""

import copy
import errno
import math
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from nmt.utils.io import atomic_path


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk); the earlier checkpoints are intact."""


def non_finite_tensors(checkpoint: dict) -> list[str]:
    """Names of the parameters and optimiser states in ``checkpoint`` that hold a NaN or an infinity.
    One read per device, not one per tensor: on a GPU each read waits for the device, and a checkpoint
    holds hundreds of tensors."""
    found, tensors = [], {}  # device -> [(name, tensor)]

    def visit(node, name: str) -> None:
        if isinstance(node, torch.Tensor):
            if node.is_floating_point():
                tensors.setdefault(node.device, []).append((name, node))
        elif isinstance(node, float):
            if not math.isfinite(node) and not name.endswith(("best_model_score", "best_k_models", "kth_value")):
                found.append(name)
        elif isinstance(node, dict):
            for key, value in node.items():
                visit(value, f"{name}.{key}" if name else str(key))
        elif isinstance(node, list | tuple):
            for index, value in enumerate(node):
                visit(value, f"{name}.{index}")

    visit(checkpoint.get("state_dict", {}), "state_dict")
    visit(checkpoint.get("optimizer_states", []), "optimizer_states")
    for named in tensors.values():
        named = [(name, t) for name, t in named if t.numel()]  # an empty tensor holds nothing non-finite
        if not named:
            continue
        # each tensor's largest magnitude, a NaN where it holds one: a few kernels for all of them, not two
        # per tensor (hundreds of launches on a GPU)
        largest = torch._foreach_norm([t for _, t in named], ord=float("inf"))
        finite = torch.isfinite(torch.stack([x.float() for x in largest])).tolist()  # the one read
        found += [name for (name, _), ok in zip(named, finite, strict=True) if not ok]
    return found


def on_host(checkpoint):
    """``checkpoint`` with every tensor on an accelerator copied to host memory, the copies queued together
    and waited for once: ``torch.save`` would copy them one at a time, each copy a wait for the device."""
    copies = []

    def visit(node):
        if isinstance(node, torch.Tensor) and node.device.type != "cpu":
            copies.append(node.to("cpu", non_blocking=True))  # pinned host memory: nothing waits yet
            return copies[-1]
        if isinstance(node, dict):
            out = copy.copy(node)  # the same kind of mapping, with its attributes (a state dict's _metadata)
            for key, value in node.items():
                out[key] = visit(value)
            return out
        if isinstance(node, list | tuple) and not hasattr(node, "_fields"):
            return type(node)(visit(value) for value in node)
        return node

    moved = visit(checkpoint)
    if copies:  # every copy done before the bytes are read
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            accelerator.synchronize()
        else:
            torch.cuda.synchronize()
    return moved


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, but through a temporary file and a rename: a process killed
    while saving leaves the previous checkpoint intact, never a truncated one. Weights or optimiser state
    with NaN or infinities are not written (the previous checkpoint stays the last good one), and a full
    disk is reported as such, with the temporary file removed."""

    last_written: str | None = None  # the file the last save wrote (None: that save wrote nothing)

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        path = Path(path)
        self.last_written = None
        bad = non_finite_tensors(checkpoint)
        if bad:
            rank_zero_warn(
                f"not writing {path}: {len(bad)} tensor(s) hold NaN or infinity (first: {bad[0]}); the previous "
                "checkpoint stays the last good one"
            )
            return
        with full_disk_named(path), atomic_path(path) as tmp:
            torch.save(on_host(checkpoint), tmp)
        self.last_written = os.path.abspath(path)


@contextmanager
def full_disk_named(path: Path) -> Iterator[None]:
    """A full disk while writing ``path`` as :class:`CheckpointWriteError`, which says what to do."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if isinstance(err, OSError) and err.errno != errno.ENOSPC and "No space" not in str(err):
            raise
        if isinstance(err, RuntimeError) and "unexpected pos" not in str(err) and "No space" not in str(err):
            raise
        raise CheckpointWriteError(
            errno.ENOSPC,
            f"no space left on {path.parent} to write {path.name}; free some space and rerun the "
            "same command to resume from the last checkpoint written",
        ) from None


class EpochCheckpoints(ModelCheckpoint):
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
                if written or (not isinstance(writer, AtomicCheckpointIO) and os.path.isfile(filepath)):
                    with full_disk_named(Path(linkpath)), atomic_path(linkpath) as tmp:
                        shutil.copyfile(filepath, tmp)
        finally:
            trainer.strategy.barrier()
