"""What the command-line checks share: the config folder, a config's keys, the names like a misspelt one, and
the config of a program that uses a checkpoint."""

import difflib
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF = Path(__file__).resolve().parents[2] / "conf"


def config_keys(node, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig

    keys = []
    for key in node.keys() if isinstance(node, DictConfig) else ():
        path = f"{prefix}{key}"
        keys.append(path)
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys += config_keys(child, path + ".")
    return keys


def closest(key: str, names: list[str]) -> list[str]:
    """Up to three of ``names`` like ``key`` (difflib's ratio at least 0.6), only those nearly as like it as
    the likest: ``decode.beam_sise`` suggests ``decode.beam_size``, not ``decode.seed`` beside it."""
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    best = difflib.SequenceMatcher(None, key, close[0]).ratio() if close else 0.0
    return [name for name in close if difflib.SequenceMatcher(None, key, name).ratio() >= best - 0.1]


def checkpoint_program(config_name: str, conf: Path) -> DictConfig | None:
    """The config of a program that uses a checkpoint (translate, evaluate, serve, export: keys of its own, no
    groups but Hydra's), None for train.py and sweep.py."""
    config = OmegaConf.load(conf / f"{config_name}.yaml")
    defaults = config.get("defaults") or []
    if any(isinstance(d, str) and d != "_self_" for d in defaults):
        return None
    groups = {re.sub(r"^(override|optional)\s+", "", str(k)) for d in defaults if isinstance(d, DictConfig) for k in d}
    return None if any(not group.startswith("hydra/") for group in groups) else config
