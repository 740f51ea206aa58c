"""Learning-rate schedules (config group ``optim``; the optimiser itself is a torch class).

Each factory takes the optimiser and the planned number of optimiser steps, and returns a LambdaLR
whose factor multiplies the optimiser's ``lr``.
"""

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

DECAYS = ("inverse_sqrt", "cosine", "linear", "constant")


def noam(optimizer: Optimizer, total_steps: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> LambdaLR:
    """Vaswani et al. 2017: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (set lr: 1.0)."""

    def rate(step: int) -> float:
        step = max(step, 1)
        return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    return LambdaLR(optimizer, rate)


def warmup_decay(
    optimizer: Optimizer, total_steps: int, warmup: int = 4000, decay: str = "inverse_sqrt", min_ratio: float = 0.0
) -> LambdaLR:
    """Linear warm-up to the optimiser's lr over ``warmup`` steps, then ``decay``:
    inverse_sqrt (lr * sqrt(warmup / step)), cosine or linear to ``min_ratio * lr`` at the last step,
    or constant."""
    if decay not in DECAYS:
        raise ValueError(f"optim.scheduler.decay={decay!r} is not one of {list(DECAYS)}")
    warmup = max(warmup, 0)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if decay == "inverse_sqrt":
            return math.sqrt(max(warmup, 1) / max(step, 1))
        if decay == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if decay == "cosine" else 1 - progress
        return min_ratio + (1 - min_ratio) * shape

    return LambdaLR(optimizer, rate)
