"""Where the tuned file of ``+tuned=<name>`` is: Hydra finds it in any config folder it searches, and the
sweep reads and checks that file, not only one of conf/tuned/."""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.utils.configs import CONF


def tuned_path(config: DictConfig) -> Path | None:
    """The file ``+tuned=<name>`` read: the first ``tuned/<name>.yaml`` of the config folders Hydra searched, in
    its order (conf/, then those ``hydra.searchpath`` adds). A file found in another folder was applied but
    never checked: only conf/tuned/ was looked in. None without one."""
    name = OmegaConf.select(config, "hydra.runtime.choices.tuned", default=None)
    if not name:
        return None
    sources = OmegaConf.select(config, "hydra.runtime.config_sources", default=None) or []
    folders = [Path(s.path) for s in sources if s.get("schema") == "file" and s.get("path")] or [CONF]
    return next((f / "tuned" / f"{name}.yaml" for f in folders if (f / "tuned" / f"{name}.yaml").is_file()), None)


def shown_path(path: Path) -> str:
    """A path as a report or a message gives it: from the repository's root where it lies in it."""
    resolved = Path(path).resolve()  # a searchpath given relative to the working folder: named whole
    try:
        return str(resolved.relative_to(CONF.parent))
    except ValueError:
        return str(resolved)
