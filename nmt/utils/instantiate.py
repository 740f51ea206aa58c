"""Turning configs into objects with Hydra's instantiate: no if/else on options anywhere."""

import importlib

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


class MissingTarget(LookupError):
    """A dotted path (a ``_target_``) that names nothing: no such module, or no such name in its module."""


def locate_target(path: str):
    """The object a dotted path names (a ``_target_``), as Hydra finds it but without Hydra's error log.
    MissingTarget where the path itself names nothing; a module of the path that fails to import for a reason
    of its own (a package it needs is not installed here) raises that error as it is."""
    parts = str(path).split(".")
    if not all(parts):
        raise MissingTarget(f"{path!r} is not a dotted path (module.Name)")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name and (module == err.name or module.startswith(f"{err.name}.")):
                continue  # this prefix is no module: a shorter one may be
            raise  # the module is there, and imports one that is not
        for i in range(end, len(parts)):
            if not hasattr(found, parts[i]):
                raise MissingTarget(f"{'.'.join(parts[:i])} has no {parts[i]}")
            found = getattr(found, parts[i])
        return found
    raise MissingTarget(f"no module {parts[0]}")
