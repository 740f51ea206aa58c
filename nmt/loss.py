"""Training loss (config group ``smoothing``)."""

import torch
from torch import nn
from torch.nn import functional as F


class LabelSmoothedCrossEntropy(nn.Module):
    """Cross-entropy against a target distribution that puts ``1 - smoothing`` on the reference token and
    spreads ``smoothing`` uniformly over the vocabulary (Szegedy et al. 2016). Padding is ignored."""

    def __init__(self, smoothing: float = 0.0, pad_id: int = 0) -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing.smoothing={smoothing} must be in [0, 1)")
        self.smoothing = smoothing
        self.pad_id = pad_id

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """logits: (batch, len, vocab), target: (batch, len).
        Returns (loss per target token, summed NLL without smoothing, number of target tokens)."""
        flat_logits = logits.reshape(-1, logits.size(-1)).float()
        flat_target = target.reshape(-1)
        loss_sum = F.cross_entropy(
            flat_logits, flat_target, ignore_index=self.pad_id, label_smoothing=self.smoothing, reduction="sum"
        )
        if self.smoothing == 0.0:
            nll_sum = loss_sum.detach()  # the same number: no second pass over the vocabulary
        else:
            with torch.no_grad():
                nll_sum = F.cross_entropy(flat_logits, flat_target, ignore_index=self.pad_id, reduction="sum")
        tokens = (flat_target != self.pad_id).sum()
        return loss_sum / tokens.clamp(min=1), nll_sum, tokens
