"""Token-budget batching: sentences of similar length together, at most ``max_tokens`` per batch."""

import zlib
from array import array
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


def token_batches(lengths: Sequence[int], max_tokens: int, order: Sequence[int]) -> list[list[int]]:
    """Cut ``order`` (indices, assumed sorted by length) into batches whose padded size
    (longest sentence x number of sentences) stays within ``max_tokens``."""
    batches, current, longest = [], [], 0
    for index in order:
        length = lengths[index]
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


class TokenBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices.

    Sentences are sorted by length (ties in a seeded random order), cut into token-budget batches, and
    the batches are shuffled; all of it depends only on (seed, epoch), so a run is reproducible.
    With several processes each rank takes every ``num_replicas``-th batch; for training the batch
    list is padded by repetition so that all ranks run the same number of steps.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        key: str = "data.max_tokens",
    ) -> None:
        if max_tokens < max(lengths, default=0):
            remedy = " or lower data.max_len (data.max_src_len for cut sources)" if key == "data.max_tokens" else ""
            raise ValueError(
                f"{key}={max_tokens} is smaller than the longest sentence ({max(lengths)} tokens): raise {key}{remedy}"
            )
        self.lengths = list(lengths)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.skip = 0  # batches of the current epoch already trained on (set when resuming mid-epoch)
        self._digest: tuple[int, int] | None = None  # (epoch, order_digest): the settings never change

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of each epoch: a new shuffle per epoch."""
        self.epoch = epoch

    def _rank_batches(self) -> list[list[int]]:
        """This rank's batches: every num_replicas-th training batch (the list padded so all ranks take
        the same number of steps); for evaluation every num_replicas-th sentence, so that even a small
        set gives each rank something to decode."""
        n = len(self.lengths)
        if not self.shuffle:
            order = sorted(range(n), key=self.lengths.__getitem__)[self.rank :: self.num_replicas]
            return token_batches(self.lengths, self.max_tokens, order)
        return self._epoch_batches()[self.rank :: self.num_replicas]

    def _epoch_batches(self) -> list[list[int]]:
        """The epoch's training batches of all ranks, in order, padded so all ranks take as many."""
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(len(self.lengths), generator=generator)
        lengths = torch.tensor(self.lengths)[order]
        order = order[torch.sort(lengths, stable=True).indices].tolist()  # by length, ties in random order
        batches = token_batches(self.lengths, self.max_tokens, order)
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        if len(batches) % self.num_replicas:
            batches += batches[: self.num_replicas - len(batches) % self.num_replicas]
        return batches

    def order_digest(self, epoch: int) -> int:
        """A checksum of epoch ``epoch``'s batches in their order, as all processes share them out (the same
        on every rank): a run resumed mid-epoch must meet the order its checkpoint stopped in. Computed
        once an epoch (the sampler's settings never change)."""
        if self._digest is not None and self._digest[0] == epoch:
            return self._digest[1]
        saved = self.epoch
        try:
            self.epoch = epoch
            batches = self._epoch_batches() if self.shuffle else self._rank_batches()
        finally:
            self.epoch = saved
        digest = 0
        for batch in batches:
            digest = zlib.crc32(array("q", batch).tobytes() + b";", digest)
        self._digest = (epoch, digest)
        return digest

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        yield from self._rank_batches()[skip:]

    def __len__(self) -> int:
        return len(self._rank_batches())


class FixedBatchSampler(TokenBatchSampler):
    """Batches of ``batch_size`` indices (language-model blocks all have the same length), with the
    epoch/skip/replica behaviour of :class:`TokenBatchSampler`: a seeded shuffle per epoch for training,
    the order as given for evaluation."""

    def __init__(
        self, size: int, batch_size: int, shuffle: bool, seed: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"data.batch_size={batch_size} must be at least 1")
        super().__init__([1] * size, batch_size, shuffle, seed, num_replicas, rank)

    def _rank_batches(self) -> list[list[int]]:
        size, batch_size = len(self.lengths), self.max_tokens
        if not self.shuffle:
            order = list(range(size))[self.rank :: self.num_replicas]
            return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        return self._epoch_batches()[self.rank :: self.num_replicas]

    def _epoch_batches(self) -> list[list[int]]:
        size, batch_size = len(self.lengths), self.max_tokens
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(size, generator=generator).tolist()
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        if len(batches) % self.num_replicas:
            batches += batches[: self.num_replicas - len(batches) % self.num_replicas]
        return batches
