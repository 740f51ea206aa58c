"""Building a data module from its config group (it reads nothing until prepare_data)."""

from nmt.utils.instantiate import as_config, instantiate


def build_datamodule(data_cfg, cache_dir: str, seed: int, **overrides):
    """The data module of group ``data``."""
    return instantiate(as_config(data_cfg), cache_dir=cache_dir, seed=seed, **overrides, _recursive_=False)
