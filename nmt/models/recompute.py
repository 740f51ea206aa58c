"""A decoder without a cache: every step re-runs the full teacher-forced pass over the prefix.

Wraps any nmt model. It exists to measure what the key/value cache saves and to check that cached
decoding gives the same translations.
"""

import torch

from nmt.models.state import DecoderState


class RecomputingDecoder:
    """The incremental interface, implemented by recomputation: ``encode`` keeps the source, and
    ``decode_step`` runs ``model(src, prefix)`` and returns the logits of the last position."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.pad_id = model.pad_id

    def position_limits(self) -> tuple[int | None, int | None]:
        """The wrapped model's (a learned position table bounds the search the same way)."""
        limits = getattr(self.model, "position_limits", None)
        return limits() if limits is not None else (None, None)

    def encode(self, src: torch.Tensor) -> DecoderState:
        return DecoderState({"src": src, "prefix": src.new_zeros(src.size(0), 0)}, step=0)

    def decode_step(self, prev_tokens: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        prefix = torch.cat((state.tensors["prefix"], prev_tokens[:, None]), dim=1)  # (batch, step + 1)
        logits = self.model(state.tensors["src"], prefix)[:, -1]
        return logits, DecoderState({"src": state.tensors["src"], "prefix": prefix}, state.step + 1)
