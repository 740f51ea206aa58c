"""The data module Lightning's loops take, around a task's data object.

The data layer (:mod:`nmt.data`) does not import Lightning: evaluate.py, translate.py, serve.py, export.py and
a sweep's plan build data objects without a trainer, and Lightning's slow import (most of the time a
checkpoint's evaluation on a small set takes) is paid only where a trainer runs. A data object has the hooks of a
LightningDataModule by name (``prepare_data``, ``setup``, ``*_dataloader``, optionally
``on_after_batch_transfer``) and a ``trainer`` attribute; Lightning checks the type of what it is given and
which hooks it overrides, so :class:`LightningData` overrides them all and hands each to the data object,
with the trainer Lightning attached.
"""

from typing import Any

import lightning as L


class LightningData(L.LightningDataModule):
    """``trainer.fit(module, datamodule=LightningData(data))``: ``data``'s hooks, as Lightning calls them."""

    def __init__(self, data) -> None:
        self.data = data  # before the base's __init__, which sets ``trainer`` (the property below)
        super().__init__()

    @property
    def trainer(self):
        return self.data.trainer

    @trainer.setter
    def trainer(self, trainer) -> None:
        # the data object reads the processes and the device of the run from it (its loaders' shares)
        self.data.trainer = trainer

    def prepare_data(self) -> None:
        self.data.prepare_data()

    def setup(self, stage: str) -> None:
        self.data.setup(stage)

    def train_dataloader(self):
        return self.data.train_dataloader()

    def val_dataloader(self):
        return self.data.val_dataloader()

    def test_dataloader(self):
        return self.data.test_dataloader()

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        hook = getattr(self.data, "on_after_batch_transfer", None)
        return batch if hook is None else hook(batch, dataloader_idx)


def lightning_data(data) -> L.LightningDataModule:
    """``data`` as Lightning takes it (a LightningDataModule already, as a test's own, is given back)."""
    return data if isinstance(data, L.LightningDataModule) else LightningData(data)
