"""Where the project's configs are, and the keys of a composed config: what the checks of a command line, a
run's config and a sweep read."""

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]  # the repository: the package and conf/ beside it
CONF = ROOT / "conf"
# config groups whose files only set the values of other groups' keys (a run's settings hold them): out of the
# code hash (nmt.utils.code), and no part of the schema that a misspelt key is checked against
VALUE_GROUPS = ("experiment", "recipe")


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


def unset_variable_message(err: BaseException, cfg: DictConfig | None = None) -> str | None:
    """One line for a config value that reads an unset environment variable (``${oc.env:NMT_DATA}/...``, where
    OmegaConf says "Environment variable 'NMT_DATA' not found"): the keys that read it and what to do; None for
    any other error."""
    import re

    from omegaconf.errors import InterpolationResolutionError

    found = re.search(r"Environment variable '([^']+)' not found", str(err))
    if not isinstance(err, InterpolationResolutionError) or not found:
        return None
    name = found.group(1)
    keys = [err.full_key] if getattr(err, "full_key", None) else []
    if not keys and cfg is not None:  # the error does not always say where: the keys written to read it
        written = re.compile(r"\$\{oc\.env:\s*" + re.escape(name) + r"\s*\}")
        keys = list(dict.fromkeys(key for key, value in _written_values(cfg) if written.search(value)))
    where = (f"{keys[0]} reads" if len(keys) == 1 else f"{', '.join(keys[:3])} read") if keys else "a value reads"
    what = " (the folder holding the corpora: docs/data.md)" if name == "NMT_DATA" else ""
    give = f", or give {keys[0]}=... on the command line" if keys else ""
    return f"{where} ${{oc.env:{name}}}, and {name} is not set: export {name}=...{what}{give}"


def _written_values(node, prefix: str = "") -> list[tuple[str, str]]:
    """Each leaf of a config as written (interpolations unresolved), by its dotted key (a list's items as
    ``key.0``)."""
    from omegaconf import ListConfig

    if isinstance(node, DictConfig):
        return [pair for key in node.keys() for pair in _written_values(node._get_node(key), f"{prefix}{key}.")]
    if isinstance(node, ListConfig):  # its items named by the list's key
        return [(prefix[:-1], value) for i in range(len(node)) for _, value in _written_values(node._get_node(i))]
    return [(prefix[:-1], str(node._value()))]


def options_with_key(key: str, conf: Path, groups: list[str]) -> list[str]:
    """For ``group.sub.key``: the options of that config group whose file sets ``sub.key`` (``model.num_heads``
    is a key of model=transformer), so that a key of another option is named as such. ``groups``: the config
    groups (folders of ``conf``)."""
    group, _, rest = key.partition(".")
    if not rest or group not in groups:
        return []
    owners = []
    for path in sorted((conf / group).glob("*.yaml")):
        # a global option's keys are top-level keys: task=translation sets task.rouge as `task: {rouge: ...}`
        overall = any("@package _global_" in line for line in path.read_text().splitlines()[:3])
        try:
            absent = object()  # a key set to null is still the option's key (additive's attention_dim: null)
            if OmegaConf.select(OmegaConf.load(path), key if overall else rest, default=absent) is not absent:
                owners.append(path.stem)
        except Exception:  # noqa: BLE001  (a file that does not load alone: not an owner to name)
            continue
    return owners
