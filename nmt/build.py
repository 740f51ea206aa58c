"""Turning configs into objects with Hydra's instantiate: no if/else on options anywhere."""

from hydra.errors import InstantiationException
from hydra.utils import instantiate as hydra_instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from nmt.data.datamodule import ParallelDataModule
from nmt.data.tokenizer import PAD_ID


def instantiate(config, *args, **kwargs):
    """Hydra's instantiate, but a ValueError raised by our own constructors (an invalid option, with a
    message naming the key and the allowed values) reaches the user unwrapped."""
    try:
        return hydra_instantiate(config, *args, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, ValueError):
            raise err.__cause__ from None
        raise


def as_config(node) -> DictConfig:
    return node if isinstance(node, DictConfig) else OmegaConf.create(node)


def build_datamodule(data_cfg, cache_dir: str, seed: int, **overrides) -> ParallelDataModule:
    """The data module of group ``data`` (reads nothing yet)."""
    return instantiate(as_config(data_cfg), cache_dir=cache_dir, seed=seed, **overrides, _recursive_=False)


def build_model(model_cfg, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module:
    """The model of group ``model``; its sub-configs (``pos``, ``norm``, ...) arrive as factories."""
    return instantiate(
        as_config(model_cfg), src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=PAD_ID
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
