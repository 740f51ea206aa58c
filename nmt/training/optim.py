"""Learning-rate schedules (config group ``optim``; the optimiser itself is a torch class), and the
optimiser's configured settings put back over a checkpoint's.

Each factory takes the optimiser and the planned number of optimiser steps, and returns a LambdaLR
whose factor multiplies the optimiser's ``lr``.
"""

import math

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

DECAYS = ("inverse_sqrt", "cosine", "linear", "constant")


def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Vaswani et al. 2017: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), from step 1."""
    step, warmup = max(step, 1), max(warmup, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_peak(d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The peak of :func:`noam_rate`, reached at step ``warmup``."""
    return noam_rate(warmup, d_model, warmup, factor)


def noam(optimizer: Optimizer, total_steps: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> LambdaLR:
    """Vaswani et al.'s schedule (:func:`noam_rate`; set lr: 1.0, which multiplies it)."""
    return LambdaLR(optimizer, lambda step: noam_rate(step, d_model, warmup, factor))


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


def optimizer_settings(optimizer: Optimizer) -> list[dict]:
    """Each parameter group's settings as the config built them (its rate as a number, and whether the
    rate was a tensor), for :func:`restore_settings` once a checkpoint has put back the saved ones."""
    return [
        {k: float(v) if k == "lr" else v for k, v in group.items() if k not in ("params", "param_names")}
        | {"lr_is_tensor": isinstance(group["lr"], torch.Tensor)}
        for group in optimizer.param_groups
    ]


def restore_settings(optimizer: Optimizer, scheduler, configured: list[dict]) -> None:
    """A resumed optimiser comes back with the settings it was saved with (its rate, betas, epsilon, weight
    decay...) beside its state. Its state and the schedule's position stay the checkpoint's; its settings
    become the config's (``configured``), so that a run continued under other settings (resume=force) trains
    with the ones it records. The current step's rate is recomputed from the config's base rate."""
    for group, settings in zip(optimizer.param_groups, configured, strict=True):
        for key, value in settings.items():
            if key not in ("lr", "lr_is_tensor"):
                group[key] = value
    if scheduler is not None and hasattr(scheduler, "lr_lambdas"):
        scheduler.base_lrs = [float(c.get("initial_lr", c["lr"])) for c in configured]
        rates = [
            base * f(scheduler.last_epoch) for f, base in zip(scheduler.lr_lambdas, scheduler.base_lrs, strict=True)
        ]
        scheduler._last_lr = list(rates)
    else:
        rates = [c["lr"] for c in configured]
    for group, settings, rate in zip(optimizer.param_groups, configured, rates, strict=True):
        if settings["lr_is_tensor"] and isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(rate)
        else:  # a number as configured (a checkpoint of graph_updates=true restores a tensor)
            group["lr"] = rate
