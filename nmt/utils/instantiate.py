"""Turning configs into objects with Hydra's instantiate: no if/else on options anywhere."""

from hydra.errors import InstantiationException
from hydra.utils import instantiate as hydra_instantiate
from omegaconf import DictConfig, OmegaConf


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
