"""Normalisation layers, written out so students can read them (config group `norm`).

Each has two interchangeable paths, as attention has: the formula written out (``fused=False``), and
PyTorch's own implementation of the same formula (``F.layer_norm``, ``F.rms_norm``; the default), one fused
kernel each way (``F.rms_norm`` from torch 2.8); ScaleNorm, which has no kernel of its own, takes the one call
``F.normalize`` (several kernels) times its gain. They give the same result up to floating-point rounding
(tested in float64, values and gradients, and against ``nn.LayerNorm`` / ``nn.RMSNorm``); in bf16-mixed runs
the norms see fp32 (the residual stream), while with ``bf16-true`` PyTorch's computes in fp32 and rounds
once, the formula rounds at each step. The written-out formula is a chain of element-wise operations, about
ten forward and more backward, each a kernel launch on a GPU without torch.compile; the fused path trains no
faster on a CPU (BENCHMARKS.md, "Means toward the GPU targets").
"""

import torch
from torch import nn
from torch.nn import functional as F


def checked_eps(eps, default: float) -> float:
    """``norm.eps``, a number > 0: at 0 or below, a constant vector (a padding row, a dead unit) divides by
    zero or less, and every batch was skipped as non-finite after the data was read. ``default``: the
    norm's own, named in the message."""
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps > 0:
        raise ValueError(f"norm.eps={eps!r}: must be a number > 0 (this norm's default: {default:g})")
    return float(eps)


class LayerNorm(nn.Module):
    """Ba et al. 2016: normalise each vector to zero mean and unit variance, then scale and shift."""

    def __init__(self, dim: int, eps: float = 1e-5, fused: bool = True) -> None:
        super().__init__()
        self.eps = checked_eps(eps, default=1e-5)
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        # x: (..., dim); statistics over the last axis, biased variance as in the paper
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}, fused={self.fused}"


class RMSNorm(nn.Module):
    """Zhang & Sennrich 2019: rescale by the root mean square only (no centring, no bias)."""

    def __init__(self, dim: int, eps: float = 1e-6, fused: bool = True) -> None:
        super().__init__()
        self.eps = checked_eps(eps, default=1e-6)
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # x: (..., dim)
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms_inv * self.weight

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}, fused={self.fused}"


class ScaleNorm(nn.Module):
    """Nguyen & Salazar 2019 ("Transformers without Tears"): project each vector onto the sphere of radius g,
    y = g * x / max(||x||_2, eps), with ONE learned scalar g per norm, initialised to sqrt(dim) (a vector of
    unit-variance entries keeps its length). No centring, no bias, no gain per dimension.

    ``eps`` bounds the norm itself from below, as the paper's code clamps it (not added to a mean square as
    in RMSNorm): a vector shorter than eps is scaled by g / eps. The written-out form clamps the sum of
    squares at eps**2 before the square root, the same bound, so that a zero vector (a padding row under
    ``pos=none``) has a finite gradient; a clamp after the root gives it 0 * inf = nan."""

    def __init__(self, dim: int, eps: float = 1e-5, fused: bool = True) -> None:
        super().__init__()
        self.eps = checked_eps(eps, default=1e-5)
        self.fused = fused
        self.scale = nn.Parameter(torch.tensor(float(dim) ** 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.normalize(x, p=2.0, dim=-1, eps=self.eps) * self.scale
        # x: (..., dim); max(sqrt(s), eps) = sqrt(max(s, eps^2))
        norm = x.pow(2).sum(dim=-1, keepdim=True).clamp_min(self.eps**2).sqrt()
        return x * (self.scale / norm)

    def extra_repr(self) -> str:
        return f"one gain, eps={self.eps}, fused={self.fused}"  # no .item(): the config check builds on meta
