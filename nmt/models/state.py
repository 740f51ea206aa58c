"""The cached decoder state that every model's incremental interface shares."""

from dataclasses import dataclass, field

import torch


@dataclass
class DecoderState:
    """What a decoder needs to produce the next token: a dict of batch-first tensors and a step count.

    Search code only ever calls :meth:`reorder` on it (to follow beams or drop finished sentences), so
    it never needs to know which architecture filled the tensors in.
    """

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    step: int = 0
    # the step count as a (1,) tensor on the device, for a model's caches of fixed size that each step
    # fills in place (``fixed_cache``); None: the caches grow and ``step`` counts
    position: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return next(iter(self.tensors.values())).size(0)

    def reorder(self, index: torch.Tensor) -> "DecoderState":
        """Gather every tensor along the batch axis: row i of the result is row index[i] of this state."""
        return DecoderState({k: v.index_select(0, index) for k, v in self.tensors.items()}, self.step, self.position)
