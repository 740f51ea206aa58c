"""Writing checkpoints safely."""

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from nmt.utils.io import atomic_path


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, but through a temporary file and a rename: a process killed
    while saving leaves the previous checkpoint intact, never a truncated one."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)
