"""Inverted dropout (Srivastava et al. 2014) with a mask that is cheap to draw on a CPU.

During training each element is zeroed with probability p and the survivors are scaled by 1 / (1 - p), so
the expected output equals the input and evaluation needs no rescaling. On a CPU, ``F.dropout`` draws its
mask with ``bernoulli_``, one generator call per element, which costs more than a matrix product of the
same tensor (BENCHMARKS.md, "CPU dropout cost"). Here the mask comes from raw random bits instead: one
64-bit draw gives four 16-bit uniform integers, each compared with a threshold. The drop probability is
then p rounded to a multiple of 1/65,536 (0.3 becomes 0.300003), and the scale uses that rounded value, so
the output's expectation is still exactly the input. On a GPU ``F.dropout`` is one fused kernel and is kept.
"""

import torch
from torch import nn
from torch.nn import functional as F

_LEVELS = 1 << 16  # 16-bit uniform integers


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A bool mask of ``shape``, True with probability 1 - p' where p' = round(p * 65536) / 65536;
    returns the mask and p'."""
    count = shape.numel()
    # full 64-bit range: every one of the four 16-bit lanes is uniform (a non-negative range would bias one)
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), 2**63 - 1)
    dropped_levels = round(p * _LEVELS)
    lanes = words.view(torch.int16)[:count].view(shape)  # uniform over [-32768, 32767]
    return lanes >= dropped_levels - _LEVELS // 2, dropped_levels / _LEVELS


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with the cheap mask on a CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p > 0.999:  # near 1 the rounded p could reach 1
        return F.dropout(x, p, training)
    mask, p_rounded = keep_mask(x.shape, p, x.device)
    if p_rounded == 0.0:
        return x
    return x * mask.to(x.dtype).mul_(1.0 / (1.0 - p_rounded))


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` that uses :func:`dropout`."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability {p} must be in [0, 1]")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
