"""Several models decoded as one: at every step the members' log-probabilities are averaged (each
member's log-softmax, then their mean), which the search renormalises like any model's scores.

The ensemble offers the incremental interface every model offers (encode, decode_step, a state with
reorder), so greedy, sampling and beam search drive it unchanged. Members must share the target
vocabulary; the caller checks that (tokenizers are not visible here).
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from nmt.decoding.constraints import position_limits


@dataclass
class EnsembleState:
    members: list

    def reorder(self, index: torch.Tensor) -> "EnsembleState":
        return EnsembleState([state.reorder(index) for state in self.members])


class Ensemble(nn.Module):
    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        if len(models) < 2:
            raise ValueError(f"an ensemble needs at least 2 models; got {len(models)}")
        pads = {m.pad_id for m in models}
        if len(pads) != 1:
            raise ValueError(f"the models pad with different ids {sorted(pads)}: they do not share a vocabulary")
        self.members = nn.ModuleList(models)
        self.pad_id = models[0].pad_id

    def position_limits(self) -> tuple[int | None, int | None]:
        """The smallest of the members' limits (None: no member has one)."""
        return tuple(
            min((limit for limit in side if limit is not None), default=None)
            for side in zip(*(position_limits(m) for m in self.members), strict=True)
        )

    def encode(self, src: torch.Tensor) -> EnsembleState:
        return EnsembleState([m.encode(src) for m in self.members])

    def decode_step(self, prev_tokens: torch.Tensor, state: EnsembleState) -> tuple[torch.Tensor, EnsembleState]:
        """prev_tokens: (batch,) -> the members' mean log-probabilities of the next token (batch, vocab)."""
        steps = [m.decode_step(prev_tokens, s) for m, s in zip(self.members, state.members, strict=True)]
        log_probs = torch.stack([F.log_softmax(logits.float(), dim=-1) for logits, _ in steps]).mean(0)
        return log_probs, EnsembleState([s for _, s in steps])

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced (batch, tgt_len, vocab): the members' mean log-probabilities at every position."""
        return torch.stack([F.log_softmax(m(src, tgt_in).float(), dim=-1) for m in self.members]).mean(0)

    @torch.no_grad()
    def attention_maps(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, torch.Tensor]:
        """The members' cross-attention per layer, averaged where the members have that layer with the
        same shape (members of other depths contribute to the layers they have)."""
        maps: dict[str, list[torch.Tensor]] = {}
        for member in self.members:
            for name, weights in member.attention_maps(src, tgt_in).items():
                maps.setdefault(name, []).append(weights)
        return {
            name: torch.stack(found).mean(0) if len({w.shape for w in found}) == 1 else found[0]
            for name, found in maps.items()
        }
