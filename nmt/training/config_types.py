"""Settings of another kind than their class declares. A class's constructor (or a schedule's function)
annotates its options (``num_buckets: int``, ``use_values: bool``, ``gamma: float``); Python takes most values
anyway: ``true`` as 1, ``6.0`` as a count until it indexes a table, a word until the first sum. Each is said
here, in one line, before any data is read, for the keys :mod:`nmt.training.config_rules` has no rule of
its own for (a new class's options among them)."""

import inspect
import types
import typing

from omegaconf import DictConfig, OmegaConf

from nmt.training.config_groups import PART_KEYS, switches
from nmt.training.config_rules import NULLABLE_SWITCHES, interpolated, ruled_keys
from nmt.utils.instantiate import locate_target

# the nodes built from a ``_target_`` whose options are the user's (a model part's under its group's name)
NODES = ("model", *PART_KEYS.values(), "smoothing", "optim.optimizer", "optim.scheduler", "data", "task")
SIMPLE = (bool, int, float, str)
SAID = {bool: "true or false", int: "a whole number", float: "a number", str: "a word"}


def setting_type_problems(cfg: DictConfig) -> list[str]:
    """One line per option whose value is not of the kind its class's annotation declares."""
    known = ruled_keys() | switches() | NULLABLE_SWITCHES  # said by their own rules
    problems = []
    for node_key in NODES:
        if node_key in PART_KEYS.values():  # a part the chosen model does not use: unused_groups says so
            part = next(k for k, group in PART_KEYS.items() if group == node_key)
            model = OmegaConf.select(cfg, "model", default=None)
            if not isinstance(model, DictConfig) or part not in model:
                continue
        node = OmegaConf.select(cfg, node_key, default=None)
        if not isinstance(node, DictConfig) or not node.get("_target_"):
            continue
        try:
            built = locate_target(str(node._target_))
        except Exception:  # noqa: BLE001  (one that does not import: config_targets says so)
            continue
        hints = annotations_of(built)
        for key in (str(k) for k in node):
            dotted = f"{node_key}.{key}"
            if key.startswith("_") or key not in hints or dotted in known or interpolated(cfg, dotted):
                continue
            kinds = simple_kinds(hints[key])
            try:
                value = node[key]
            except Exception:  # noqa: BLE001  (an interpolation that does not resolve: said elsewhere)
                continue
            if kinds is not None and not fits(value, kinds):
                name = getattr(built, "__name__", str(node._target_))
                problems.append(f"  {dotted}={value!r}: {name} takes {said(kinds)} as {key}")
    return problems


def annotations_of(built) -> dict[str, object]:
    """The annotated parameters of a function, or of a class's ``__init__`` and of those up its classes that
    ``**kwargs`` hands on to; a parameter annotated nowhere, or annotations that cannot be read, are left out."""
    hints: dict[str, object] = {}
    functions = [built] if not isinstance(built, type) else [k.__init__ for k in built.__mro__ if "__init__" in vars(k)]
    for function in functions:
        try:
            found = typing.get_type_hints(function)
            params = inspect.signature(function).parameters
        except Exception:  # noqa: BLE001  (a builtin, a name of a module not imported)
            return hints
        hints = {**{k: v for k, v in found.items() if k != "return"}, **hints}  # the nearest class's first
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            break
    return hints


def simple_kinds(annotation) -> tuple | None:
    """(bool, int, float, str, or None for null) that an annotation allows, or None for any other annotation
    (a tuple, a callable, a tensor), which is not checked."""
    if annotation in SIMPLE:
        return (annotation,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = typing.get_args(annotation)
        if all(m in SIMPLE or m is type(None) for m in members):
            return tuple(None if m is type(None) else m for m in members)
    return None


def fits(value, kinds: tuple) -> bool:
    if value is None:
        return None in kinds
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int):
        return int in kinds or float in kinds
    if isinstance(value, float):
        return float in kinds
    return isinstance(value, str) and str in kinds


def said(kinds: tuple) -> str:
    words = [SAID[k] for k in kinds if k is not None and not (k is int and float in kinds)]
    return " or ".join(words + (["null"] if None in kinds else []))
