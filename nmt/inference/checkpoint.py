"""Reading the checkpoints train.py writes: plain data only, loaded with ``weights_only=True``."""

import os
from pathlib import Path

import torch

CHECKPOINT_KEY = "nmt"  # the checkpoint's section holding the config and tokenizers
CHECKPOINT_FORMAT = 1


class CheckpointError(ValueError):
    """A file that cannot serve as an nmt checkpoint."""


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a checkpoint written by train.py with ``weights_only=True`` (no code runs from the file)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file (train.py writes them under <run_dir>/checkpoints/)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for foreign or damaged files, some without a message
        reason = type(err).__name__ + "".join(f": {line}" for line in str(err).splitlines()[:1])
        raise CheckpointError(
            f"{path} is not a readable PyTorch checkpoint ({reason}); pass a .ckpt written by train.py"
        ) from None
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a checkpoint of nmt's train.py (it has no '{CHECKPOINT_KEY}' "
            "section with the config and tokenizers); pass a .ckpt from <run_dir>/checkpoints/"
        )
    section = checkpoint[CHECKPOINT_KEY]
    for key in ("config", "src_tokenizer", "tgt_tokenizer"):
        if not section.get(key):
            raise CheckpointError(
                f"{path}: the checkpoint's '{CHECKPOINT_KEY}' section lacks '{key}'; "
                "it was not written completely: use another checkpoint of the run"
            )
    return checkpoint


def epoch_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """The per-epoch checkpoints of a run, oldest first."""
    return sorted(Path(folder).glob("epoch*.ckpt"))


def average_state_dicts(state_dicts: list[dict]) -> dict:
    """Element-wise mean of floating-point tensors (Vaswani et al. average the last checkpoints)."""
    averaged = {}
    for key, first in state_dicts[0].items():
        if torch.is_floating_point(first):
            averaged[key] = sum(sd[key].double() for sd in state_dicts).div(len(state_dicts)).to(first.dtype)
        else:
            averaged[key] = first
    return averaged
