"""Where the project's configs are, and the keys of a composed config: what the checks of a command line, a
run's config and a sweep read."""

from pathlib import Path

from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[2]  # the repository: the package and conf/ beside it
CONF = ROOT / "conf"


def dotted_keys(node, prefix: str = "") -> list[str]:
    """Every key of a config, nested ones dotted (``model.d_model``), parents before their children;
    values are not resolved (an interpolation that needs Hydra's runtime is read as written)."""
    keys = []
    for key in node.keys() if isinstance(node, DictConfig) else ():
        path = f"{prefix}{key}"
        keys.append(path)
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys += dotted_keys(child, path + ".")
    return keys
