"""The loaders of the data modules: each process its share of the batches, and a training loader that a
resumed run continues mid-epoch."""

from collections.abc import Callable

import torch
from torch.utils.data import DataLoader


class ResumableDataLoader(DataLoader):
    """The training loader of a run: each epoch its own shuffle, and a run resumed mid-epoch continues with
    the next batch.

    Where the loader stands is computed, each time an epoch's batches are drawn, from the number of batches
    the run has trained (``batches_trained()``, a count that Lightning keeps in every checkpoint): with
    ``epoch_length`` batches an epoch, the epoch is their quotient and the batches to skip the remainder.
    Lightning sets the epoch of a loader's ``sampler`` or of ``batch_sampler.sampler``, never of a batch
    sampler itself, and its epoch counters do not say where a resumed run stands in every case (a checkpoint
    written after an epoch's last batch, a resumed run's later epochs), while that count always does.
    """

    def __init__(self, *args, batches_trained: Callable[[], int], limit: int | float, **kwargs) -> None:
        # a DataLoader draws its workers' base seed from the global random numbers each time an epoch
        # starts, unless it has a generator of its own; with one, the dropout masks after a checkpoint
        # saved at the end of an epoch are the same whether the run went on or was resumed from it
        kwargs.setdefault("generator", torch.Generator().manual_seed(0))
        super().__init__(*args, **kwargs)
        self.batches_trained, self.limit = batches_trained, limit

    def epoch_length(self) -> int:
        """Batches an epoch trains: all of the sampler's, or as many as ``trainer.limit_train_batches``
        lets Lightning take (its rule: an int caps them, a fraction scales them down)."""
        batches = len(self.batch_sampler)
        return min(batches, self.limit) if isinstance(self.limit, int) else max(int(batches * self.limit), 1)

    def position(self) -> tuple[int, int]:
        """(epoch, batches of it already trained)."""
        return divmod(int(self.batches_trained()), self.epoch_length())

    def __iter__(self):
        epoch, done = self.position()
        self.batch_sampler.set_epoch(epoch)
        self.batch_sampler.skip = done
        return super().__iter__()

    # a stateful loader tells Lightning that a run resumed mid-epoch continues where it stopped (otherwise it
    # warns); the state itself is only a record: the position comes from the count of batches trained
    def state_dict(self) -> dict:
        epoch, done = self.position()
        # the order matters only to a run resumed inside an epoch (at its start any order is a whole epoch's)
        return {"epoch": epoch, "batches_done": done, "order": self.order_digest(epoch) if done else None}

    def order_digest(self, epoch: int) -> int | None:
        """A checksum of epoch ``epoch``'s batch order (None for a batch sampler that gives none)."""
        digest = getattr(self.batch_sampler, "order_digest", None)
        return digest(epoch) if digest is not None else None

    def load_state_dict(self, state: dict) -> None:
        pass


# the splits Lightning's stages read (anything else: all three)
STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}


def sharded_loader(
    datamodule, dataset, make_sampler, collate_fn, num_workers: int, resumable: bool, split: str = "the"
) -> DataLoader:
    """A loader whose batch sampler (``make_sampler(num_replicas, rank)``) gives each process its own
    share of the batches; a resumable (training) loader attached to a trainer continues mid-epoch where
    a killed run stopped. An evaluation ``split`` of fewer examples than processes is refused: a process
    without a share failed in Lightning's words ("zero length") and took the others down with it."""
    trainer = getattr(datamodule, "trainer", None)
    world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
    # an evaluation set is shared out, each example once; training's batches are repeated to share evenly
    if world > 1 and not resumable and len(dataset) < world:  # alike in every process: none waits for another
        raise ValueError(
            f"data: the {split} set has {len(dataset)} example(s), fewer than this run's {world} processes "
            "(trainer.devices x trainer.num_nodes), each of which takes a share: give it at least one example "
            "per process, or run fewer processes"
        )
    options = dict(
        batch_sampler=make_sampler(world, rank),
        collate_fn=collate_fn,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        # a copy to a GPU from pageable memory makes the host wait for the device; from pinned memory not
        pin_memory=trainer is not None and trainer.strategy.root_device.type == "cuda",
    )
    if resumable and trainer is not None:
        trained = trainer.fit_loop.epoch_loop.batch_progress.total  # the run's, across epochs and resumes
        limit = trainer.limit_train_batches
        return ResumableDataLoader(dataset, batches_trained=lambda: trained.processed, limit=limit, **options)
    # a generator of its own, as training's: the workers' base seed was drawn from the global random numbers
    # once per iterator, which is once (persistent workers) or at every validation (none, or after a resume), so
    # data.num_workers and resuming changed the dropout masks that followed, and so the trained weights
    return DataLoader(dataset, generator=torch.Generator().manual_seed(0), **options)
