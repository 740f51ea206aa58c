"""Where the tuned file of ``+tuned=<name>`` is (or the chosen experiment's): Hydra finds it in any config folder
it searches, and the sweep reads and checks that file, not only one of conf/tuned/."""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.utils.configs import CONF


def tuned_path(config: DictConfig) -> Path | None:
    """The file ``+tuned=<name>`` read: the first ``tuned/<name>.yaml`` of the config folders Hydra searched, in
    its order (conf/, then those ``hydra.searchpath`` adds). A file found in another folder was applied but
    never checked: only conf/tuned/ was looked in. None without one."""
    return chosen_file(config, "tuned")


def chosen_file(config: DictConfig, group: str) -> Path | None:
    """The file of the option chosen for ``group`` (``experiment``, ``tuned``), as Hydra found it: the first
    ``<group>/<option>.yaml`` of the config folders it searched, in its order. None where none is chosen."""
    name = OmegaConf.select(config, f"hydra.runtime.choices.{group}", default=None)
    if not name or name == "null":
        return None
    folders = config_folders(config)
    return next((f / group / f"{name}.yaml" for f in folders if (f / group / f"{name}.yaml").is_file()), None)


def config_folders(config: DictConfig) -> tuple[Path, ...]:
    """The config folders Hydra searched, in its order: conf/, then those ``hydra.searchpath`` adds."""
    sources = OmegaConf.select(config, "hydra.runtime.config_sources", default=None) or []
    return tuple(Path(s.path) for s in sources if s.get("schema") == "file" and s.get("path")) or (CONF,)


def experiment_factors(config: DictConfig) -> dict:
    """The factors the chosen experiment's file sets (its ``hydra.sweeper.params``), {} for none."""
    path = chosen_file(config, "experiment")
    if path is None:
        return {}
    params = OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params", default=None)
    return dict(params) if isinstance(params, DictConfig) else {}


def shown_path(path: Path) -> str:
    """A path as a report or a message gives it: from the repository's root where it lies in it."""
    resolved = Path(path).resolve()  # a searchpath given relative to the working folder: named whole
    try:
        return str(resolved.relative_to(CONF.parent))
    except ValueError:
        return str(resolved)
