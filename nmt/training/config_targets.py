"""The ``_target_`` of every node Hydra builds, checked before any data is read: one that names nothing is
one line with the closest name, and a model part that the model builds once per size must be partial."""

import difflib

from omegaconf import DictConfig, OmegaConf

from nmt.training.config_groups import MODEL_PART_GROUPS, hydra_choices, unused_model_parts
from nmt.utils.instantiate import MissingTarget, locate_target

# nodes built where the trainer is made, whose targets import Lightning: a sweep's plan and check_config start
# without it, so these are left to Hydra's own message
BUILT_BY_THE_TRAINER = ("logger",)


def target_problems(cfg: DictConfig, choices: dict | None = None) -> list[str]:
    """Every ``_target_`` that names nothing (a misspelt class, a module that is not there), with the closest
    names, where Hydra said it in a screen of its own once it built the node; and a model part (pos, norm,
    attention) whose file lacks ``_partial_: true``, which the model builds once per size (Hydra built it
    with no size: "missing 1 required positional argument"). A target whose module fails to import here for
    a reason of its own (a package it needs, a GPU) is left to its build. ``choices``: the run's group
    options (default: Hydra's record of this run), to name a part's file."""
    problems = []
    for key, target in _targets(OmegaConf.to_container(cfg, resolve=False)):
        if key.split(".")[0] in BUILT_BY_THE_TRAINER:
            continue
        try:
            locate_target(target)
        except MissingTarget:
            module, _, name = target.rpartition(".")
            problems.append(f"  {key}._target_={target}: {_missing(module, name)}")
        except Exception:  # noqa: BLE001  (its module is there and fails here: its build says why)
            continue
    choices = hydra_choices() if choices is None else choices
    unused = unused_model_parts(cfg)
    for group in (g for g in MODEL_PART_GROUPS if g not in unused):
        node = cfg.get(group)
        if isinstance(node, DictConfig) and node.get("_target_") and not node.get("_partial_"):
            where = f"conf/{group}/{choices[group]}.yaml" if choices.get(group) else f"the {group} node"
            problems.append(
                f"  {group}: the model builds {node._target_} once per size, so {where} needs _partial_: true"
            )
    return problems


def _targets(node, prefix: str = "") -> list[tuple[str, str]]:
    """(key, target) of every node that names a ``_target_`` of its own (an interpolated node is checked
    where it is written)."""
    found = []
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and target and "${" not in target:
            found.append((prefix.rstrip(".") or "the config", target))
        for key, value in node.items():
            found += _targets(value, f"{prefix}{key}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _targets(value, f"{prefix}{index}.")
    return found


def _missing(module: str, name: str) -> str:
    """Why ``module.name`` names nothing, with the names like it in its module (or in the deepest module of
    the path that imports)."""
    if not module:
        return "not a dotted path (module.Name)"
    try:
        owner = locate_target(module)
    except MissingTarget:
        parent, _, missing = module.rpartition(".")
        return f"no module {module} ({_missing(parent, missing) if parent else 'not installed'})"
    names = [n for n in dir(owner) if not n.startswith("_")]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {module}.{close[0]}?" if close else ""
    return f"{module} has no {name}{hint}"
