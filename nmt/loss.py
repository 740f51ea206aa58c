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
        # one log-softmax serves both numbers: a second pass over (tokens x vocab) for the NLL alone
        # cost about as much as the loss itself
        log_probs = F.log_softmax(logits.reshape(-1, logits.size(-1)).float(), dim=-1)
        flat_target = target.reshape(-1)
        keep = flat_target != self.pad_id
        nll_sum = F.nll_loss(log_probs, flat_target, ignore_index=self.pad_id, reduction="sum")
        if self.smoothing == 0.0:
            loss_sum = nll_sum
        else:
            # PyTorch's convention: (1 - eps) on the reference, eps / V on every token (the reference too)
            uniform_sum = -(log_probs.sum(dim=-1) * keep).sum() / log_probs.size(-1)
            loss_sum = (1.0 - self.smoothing) * nll_sum + self.smoothing * uniform_sum
        tokens = keep.sum()
        return loss_sum / tokens.clamp(min=1), nll_sum.detach(), tokens
