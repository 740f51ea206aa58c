"""The settings that choose how and where a run computes: ``precision=auto`` resolved for the device at hand
(:func:`resolve_precision`, which training, a sweep's plan and the benchmarks read), and the checks of
what its means of speed cannot do together or on its device (CUDA graphs, weight casts, attention
kernels, deferred checks of non-finite updates, the processes' strategy)."""

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from nmt.training import graph_updates, weight_casts
from nmt.training.config_groups import keywords, target_class


def _cpu_has_bf16_units() -> bool:
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private: absent from some builds
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(precision: str, accelerator: str = "auto") -> str:
    """``precision=auto``: bf16-mixed where the device multiplies bf16 matrices in hardware (a GPU with
    bf16, a CPU with AVX512-BF16 or AMX), otherwise 32-true (emulated bf16 is slower than fp32). Any other
    value is returned as given."""
    if str(precision) != "auto":
        return precision
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    if accelerator in ("auto", "cpu"):
        return "bf16-mixed" if _cpu_has_bf16_units() else "32-true"
    return "32-true"


def device_problems(cfg: DictConfig) -> list[str]:
    """What the run's means of speed cannot do together, or on its device."""
    problems = _deferred_guard_problems(cfg)
    if cfg.get("graph_updates"):
        problems += [
            f"  {problem}"
            for problem in graph_updates.unsupported(
                check_every=cfg.get("check_every"),
                fused=OmegaConf.select(cfg, "optim.optimizer.fused", default=None),
                accumulate=OmegaConf.select(cfg, "trainer.accumulate_grad_batches", default=1),
                precision=OmegaConf.select(cfg, "trainer.precision", default=""),
                compile=cfg.get("compile"),
                world_size=_devices(OmegaConf.select(cfg, "trainer.devices", default=1)),
                accelerator=OmegaConf.select(cfg, "trainer.accelerator", default="auto"),
            )
        ]
    if cfg.get("cast_weights_once"):
        problems += [
            f"  {problem}"
            for problem in weight_casts.unsupported(
                precision=OmegaConf.select(cfg, "trainer.precision", default=""), compile=cfg.get("compile")
            )
        ]
    if cfg.get("cudnn_attention") is not None:
        model_class = target_class(cfg, "model")
        taken = keywords(model_class) if model_class is not None else None
        if OmegaConf.select(cfg, "trainer.accelerator", default="") == "cpu":
            problems.append(
                f"  cudnn_attention={cfg.cudnn_attention}: chooses among a GPU's attention kernels; a CPU run has "
                "none of cuDNN's (leave it null)"
            )
        elif taken is not None and "fused_attention" not in taken:  # the models that call PyTorch's kernel
            problems.append(
                f"  cudnn_attention={cfg.cudnn_attention}: chooses among the kernels of PyTorch's fused attention, "
                f"which {model_class.__name__} does not call (leave it null)"
            )
    strategy = str(OmegaConf.select(cfg, "trainer.strategy", default="auto") or "auto")
    if any(word in strategy for word in ("spawn", "fork", "notebook")):
        # these start the processes from this one: the task and data are pickled to them (which fails) or
        # forked with its threads, and the run stops on a traceback after the data is read
        problems.append(
            f"  trainer.strategy={strategy!r}: runs start their processes through Lightning's launcher (the "
            "command runs once per process); use trainer.strategy=ddp (trainer=ddp)"
        )
    return problems


def _devices(devices) -> int:
    """How many devices ``trainer.devices`` names, where the config alone says (1 otherwise)."""
    if isinstance(devices, int) and devices > 1:
        return devices
    if isinstance(devices, list | ListConfig):
        return len(devices)
    return 1


def _deferred_guard_problems(cfg: DictConfig) -> list[str]:
    """check_every > 1 leaves skipping a non-finite update to the optimiser on the device."""
    every = cfg.get("check_every")
    if not isinstance(every, int) or every <= 1:
        return []
    problems = []
    if OmegaConf.select(cfg, "optim.optimizer.fused", default=None) is not True:
        problems.append(
            f"  check_every={every}: needs optim.optimizer.fused=true (a fused Adam or AdamW skips a non-finite "
            "update on the device), or check_every=1"
        )
    if str(OmegaConf.select(cfg, "trainer.precision", default="")) in ("16-mixed", "16"):
        problems.append(
            f"  check_every={every}: trainer.precision=16-mixed has a loss scaler that decides which updates "
            "to skip; use check_every=1"
        )
    return problems
