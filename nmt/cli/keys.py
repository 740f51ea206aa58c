"""Keys and group options the composed config does not have, said in one line with the closest names (Hydra
would suggest ``+key=value``, which adds a key that nothing reads)."""

import difflib
import functools
import re
from pathlib import Path
from typing import NamedTuple

from omegaconf import OmegaConf

from nmt.cli.checkpoint_programs import OPEN_BLOCKS, checkpoint_program
from nmt.cli.names import closest
from nmt.data.build import EVALUATION_DATA_OPTIONS
from nmt.training.config_groups import unused_model_parts
from nmt.utils.configs import CONF, dotted_keys, options_with_key


def unknown_key_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line for a switch given another word than true or false (:func:`_switch_message`), or for the
    first ``key=value`` of ``argv`` whose key is neither a config group nor a key of the composed config
    (for a sweep, of the config Hydra composes first), with the closest known names (Hydra itself would
    suggest ``+key=value``, which adds a key that nothing reads). None when every key is known, or when
    composing fails for another reason (Hydra then reports that one)."""
    from hydra.core.global_hydra import GlobalHydra

    groups = sorted(str(p.relative_to(conf)) for p in conf.rglob("*") if p.is_dir())
    items = [a for a in argv if ("=" in a or a.startswith("~")) and not a.startswith(("-", "+", "hydra"))]
    group_overrides = [f"{k}={v.split(',')[0]}" for k, _, v in (a.partition("=") for a in items) if k in groups]
    plain = [a.lstrip("~").partition("=")[0] for a in items if a.lstrip("~").partition("=")[0] not in groups]
    if not plain and not any(a.startswith("++") for a in argv):
        return None
    if GlobalHydra.instance().is_initialized():
        return None  # inside a test or a program that composes configs itself
    try:
        composed = _Composed.of(config_name, conf, groups, items, group_overrides)
    except Exception:  # a bad group option or the like: Hydra's own message names it
        return None
    known = dotted_keys(composed.cfg)
    # ++key=value sets a key as key=value does: its switch checked too
    switch = _switch_message(composed.cfg, [*items, *(a.lstrip("+") for a in argv if a.startswith("++") and "=" in a)])
    if switch:
        return switch
    swept = composed.swept
    first_keys = dotted_keys(composed.first) if composed.first is not None else known
    for key in plain:
        group = key.split(".")[0]
        if key in known and key not in first_keys and group in swept:
            value = next(a.partition("=")[2] for a in items if a.lstrip("~").partition("=")[0] == key)
            return (
                f"error: {key!r} (on the command line): a sweep's config is composed first with "
                f"{group}={composed.first_choices.get(group)} (the default), which has no such key, and with "
                f"{group}={swept[group]} only after; write ++{key}={value} to set it in every run (every level of "
                f"{group} must then take it)"
            )
        if key in known or (group in swept and key in first_keys):
            continue  # a key of the default and of some levels: the sweep's plan names the levels without it
        parent, _, option = key.rpartition(".")
        if parent == "validation.search" and option in _search_options():  # a block that lists its defaults only
            return (
                f"error: {key!r} (on the command line): validation.search takes every search option, but lists "
                f"only those it sets: add this one with +{key}=... ({_search_readers(option)})"
            )
        owners = options_with_key(key, conf, groups)  # the group's other options that have this key
        hint = _unknown_key_hint(key, config_name, conf, groups, composed, known, owners)
        # a search option's block takes the options it lists: a new key there is refused, not added; nor is a
        # key of another option of a group added to this one (the group's own check refuses it)
        adds = "" if parent in ("decode", "validation.search") or owners else f"; +{key}=... adds a new key"
        lists = "the groups"
        if checkpoint_program(config_name, conf) is not None:  # keys of its own, no groups: an added key is refused
            lists = "its keys"
            adds = ""  # evaluate.py's data keys given with +: said in the hint
        return (
            f"error: {key!r} (on the command line) is neither a key of the {config_name} config nor a config "
            f"group: {hint} (python {config_name}.py --help lists {lists}{adds})"
        )
    return None


class _Composed(NamedTuple):
    """The config a command line composes, without Hydra's runtime: ``choices``, each group's option;
    ``swept``, each group given several options (a sweep's) and its options as written; ``first`` and
    ``first_choices``, the config Hydra composes first for such a sweep (each swept group at its default),
    None and {} where nothing is swept."""

    cfg: object
    choices: dict
    swept: dict[str, str]
    first: object
    first_choices: dict

    @classmethod
    def of(cls, config_name: str, conf: Path, groups: list[str], items: list[str], group_overrides: list[str]):
        from hydra import compose, initialize_config_dir

        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose(config_name, overrides=group_overrides, return_hydra_config=True)
            # a sweep's grid may choose groups too (grid=rnn sets model=rnn): compose with its first levels
            params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
            chosen = {o.partition("=")[0] for o in group_overrides}
            grid_groups = [f"{k}={str(v).split(',')[0]}" for k, v in params.items() if k in groups and k not in chosen]
            if grid_groups:
                cfg = compose(config_name, overrides=[*grid_groups, *group_overrides], return_hydra_config=True)
            choices = dict(cfg.hydra.runtime.choices)
            cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
            # a sweep's groups given several options: Hydra composes its own config first with each at its
            # default (model=transformer for model=rnn,boe), and sets the other keys there
            swept = {k: v for k, _, v in (a.partition("=") for a in items) if k in groups and "," in v}
            first, first_choices = None, {}
            if swept:
                others = [o for o in group_overrides if o.partition("=")[0] not in swept]
                first = compose(config_name, overrides=others, return_hydra_config=True)
                first_choices = dict(first.hydra.runtime.choices)
                first = OmegaConf.masked_copy(first, [k for k in first if k != "hydra"])
        return cls(cfg, choices, swept, first, first_choices)


def _unknown_key_hint(
    key: str, config_name: str, conf: Path, groups: list[str], composed: _Composed, known: list[str], owners: list[str]
) -> str:
    """What to say of ``key``, which the composed config lacks: whose key it is, or the closest names."""
    cfg, choices, swept = composed.cfg, composed.choices, composed.swept
    close = closest(key, list(dict.fromkeys(known + groups)))
    group = key.split(".")[0]
    parent, _, option = key.rpartition(".")
    keys = [k for k in known if k.startswith(f"{group}.")]
    opened = checkpoint_program(config_name, conf) is not None and key.startswith(OPEN_BLOCKS.get(config_name, ()))
    taken = [f"data.{k}" for k in EVALUATION_DATA_OPTIONS]  # evaluate.py's, listed in its block or not
    if opened and keys and key in taken:  # it lists some of them, and takes the others with +
        return f"{config_name}.py's {group} block lists only {', '.join(keys)}; give this one with +{key}=..."
    if opened and keys:  # a key it refuses, even with +: a misspelling of one it takes, or all of them
        near = difflib.get_close_matches(key, taken, n=1, cutoff=0.85)
        return (
            f"did you mean {near[0]!r}?"
            if near
            else f"an evaluation keeps the run's other {group} settings; {config_name}.py takes these of a "
            f"run's {group} keys: {', '.join(taken)}"
        )
    if owners and choices.get(group) is None and keys:  # not a group here: the config's own block of that name
        return f"{config_name}.py's {group} block takes only {', '.join(keys)}"
    if owners and group in swept and set(owners) & set(swept[group].split(",")):
        levels = [o for o in swept[group].split(",") if o not in owners]
        return (
            f"it is a key of {' and '.join(f'{group}={o}' for o in owners if o in swept[group].split(','))}, "
            f"not of {', '.join(f'{group}={o}' for o in levels)}, and a sweep sets it in every run: sweep "
            f"those levels apart (a sweep of {group}={owners[0]} alone takes {key})"
        )
    if owners and choices.get(group) is not None and group in unused_model_parts(cfg):
        # the other option would be refused next: the model reads no such group
        model = choices.get("model") or OmegaConf.select(cfg, "model._target_", default="this model")
        return f"model={model} does not use group {group!r} (a key of {group}={owners[0]}); remove it"
    if owners and choices.get(group) is not None:
        return f"it is a key of {' or '.join(f'{group}={o}' for o in owners)}, not of {group}={choices.get(group)}"
    if same_name := [k for k in known if k.rpartition(".")[2] == (option or key)][:3]:
        return f"did you mean {' or '.join(repr(k) for k in same_name)}?"  # data.seed: the config's own seed
    if elsewhere := _named_elsewhere(option or key, conf, groups):  # model.attention_dim: attention's key
        return f"{option or key} is a key of {' and of '.join(elsewhere)}"
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return "no key or group has a similar name"


SWITCH_WORDS = ("yes", "no", "y", "n", "on", "off", "t", "f", "none", "enabled", "disabled", "enable", "disable")


def _switch_message(cfg, items: list[str]) -> str | None:
    """One line for a switch (a key whose composed value is true or false) given another word: Hydra keeps
    ``joint=no`` as the string 'no', which every ``if`` then reads as true."""
    for item in items:
        key, _, value = item.lstrip("~").partition("=")
        # composed without Hydra's runtime: a value that interpolates it (the run's name) is not resolved here
        if not isinstance(OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False), bool):
            continue
        words = [v.strip().strip("'\"") for v in value.split(",")]
        # words meant as a switch; a key that also takes a word (compile=layers) checks its words itself
        wrong = [w for w in words if w.lower() in SWITCH_WORDS]
        if wrong:
            return (
                f"error: {key}={value} (on the command line): {wrong[0]!r} is read as a word (true to an if), not "
                "as a switch; give true or false"
            )
    return None


def _search_options() -> list[str]:
    from nmt.decoding.settings import SearchConfig

    return list(SearchConfig.__dataclass_fields__)


def _search_readers(option: str) -> str:
    from nmt.decoding.settings import readers

    return readers(option, "validation.search")


def _named_elsewhere(name: str, conf: Path, groups: list[str]) -> list[str]:
    """Where a key of this name is set by an option of a config group, as ``attention=additive
    (attention.attention_dim)``: a key given under another block (``model.attention_dim``) is told where it
    lives, not matched to the closest spelling (``model.attention``). At most two places."""
    found = []
    for group in groups:
        for path in sorted((conf / group).glob("*.yaml")):
            if any("@package" in line for line in path.read_text().splitlines()[:3]):
                continue  # an option placed elsewhere (everywhere, a grid's sweeper): not its group's keys
            try:
                keys = [k for k in _dotted(OmegaConf.to_container(OmegaConf.load(path))) if k.split(".")[-1] == name]
            except Exception:  # noqa: BLE001  (a file that does not load alone)
                continue
            found += [f"{group}={path.stem} ({group}.{k})" for k in keys if not k.startswith("_")]
    return found[:2]


def _dotted(node, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return [prefix[:-1]] if prefix else []
    return [k for key, value in node.items() for k in _dotted(value, f"{prefix}{key}.")]


def unknown_option_message(argv: list[str], conf: Path = CONF) -> str | None:
    """One line for the first ``group=option`` of ``argv`` whose option has no file in the group (Hydra's own
    report spans a screen: the search path, the options, a hint about a stack trace), listing the valid ones.
    Values with Hydra's sweep syntax (choice(...), glob(...), ...) are left to Hydra. Folders the command
    line adds to Hydra's search path (``hydra.searchpath=[file://...]``) hold options too."""
    extra = _searched_folders(argv)
    if extra is None:
        return None
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        group = conf / key
        hydras = key.startswith("hydra/")  # hydra/launcher=...: Hydra's groups and its plugins' options
        if not sep or arg.startswith(("-", "~")) or not key or not (hydras or group.is_dir()) or key == "hydra":
            continue
        if key.startswith("hydra.") or not re.fullmatch(r"[\w./-]+(,[\w./-]+)*", value):
            continue
        own_config = any(a.startswith(("-cn", "--config-name", "-cd", "--config-dir")) for a in argv)
        if not hydras and not arg.startswith("+") and not own_config and key in _groups_added_only(conf):
            # Hydra's report ("Could not override 'tuned'. No match in the defaults list.") spans three lines
            return (
                f"error: {arg} (on the command line): no config chooses a {key} by default, so one is added, not "
                f"replaced: +{key}={value}"
            )
        options = _hydra_group_options(key, conf) if hydras else None
        if hydras and not options:
            continue  # not read here: Hydra's own report
        if not hydras:
            options = sorted(
                {
                    str(p.relative_to(g).with_suffix(""))
                    for g in (group, *(f / key for f in extra))
                    for p in g.rglob("*.yaml")
                }
            )
        for option in value.split(","):
            if option == "null":  # Hydra's "Config group override must be a string or a list", in a traceback
                instead = f"{key}=none chooses its option none" if "none" in options else "leave it out for its default"
                return (
                    f"error: {key}=null (on the command line): a group takes one of its options, not null ({instead}); "
                    f"valid: {', '.join(options)}"
                )
            if option not in options:
                close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
                plus = "+" if arg.startswith("+") else ""  # +tuned=...: a group train.py's defaults do not choose
                hint = f" (did you mean {plus}{key}={close[0]}?)" if close else ""
                setting = "" if close or hydras else _setting_of_an_option(option, group)
                hint = f" ({setting}?)" if setting else hint
                return (
                    f"error: {key}={option} (on the command line): not an option of group {key}{hint}; "
                    f"valid: {', '.join(options)}"
                )
    return None


def _setting_of_an_option(word: str, group: Path) -> str | None:
    """``model=rnn model.cell=lstm`` for ``model=lstm``: where an option's file lists the word among a key's
    values (``cell: gru  # gru | lstm``), the word names a setting of that option, not an option. Not for a
    switch's, a null's or a number's words, which many keys share."""
    if word.lower() in ("true", "false", "null", "none") or re.fullmatch(r"[-+.\de]+", word):
        return None
    for path in sorted(group.glob("*.yaml")):
        for line in path.read_text(encoding="utf-8").splitlines():
            key, colon, rest = line.partition(":")
            value, _, comment = rest.partition("#")
            if colon and key and not key.startswith((" ", "#")):
                values = re.split(r"[\s|,/]+", value.strip()) + re.split(r"\s*\|\s*", comment.strip().split(" (")[0])
                if word in values:
                    return f"{group.name}={path.stem} {group.name}.{key.strip()}={word}"
    return None


@functools.cache
def _groups_added_only(conf: Path) -> frozenset[str]:
    """The config groups that no entry point's config (``conf/*.yaml``) names in its defaults list, so that a
    command line adds their option (``+tuned=<name>``) and cannot replace one (``tuned=<name>``). A user's own
    primary config (``--config-name``, ``--config-dir``) may name one: the caller leaves those to Hydra."""
    named = set()
    for path in conf.glob("*.yaml"):
        try:
            defaults = OmegaConf.to_container(OmegaConf.load(path)).get("defaults") or []
        except Exception:  # noqa: BLE001 - a file that does not load alone names nothing here
            continue
        for entry in defaults:
            for key in entry if isinstance(entry, dict) else ():
                named.add(str(key).removeprefix("optional ").removeprefix("override ").lstrip("/"))
    return frozenset({p.name for p in conf.iterdir() if p.is_dir() and p.name != "hydra"} - named)


def _searched_folders(argv: list[str]) -> list[Path] | None:
    """The folders ``hydra.searchpath=[file://a,file://b]`` and ``--config-dir`` (``-cd``) on the command line
    add; None where it adds a place not read here (pkg://...), whose options are then left to Hydra's own
    report."""
    folders = []
    for number, arg in enumerate(argv):
        if arg in ("-cd", "--config-dir") and number + 1 < len(argv):  # Hydra's flag adds a folder too
            folders.append(Path(argv[number + 1]))
        elif arg.startswith("--config-dir="):
            folders.append(Path(arg.partition("=")[2]))
        key, _, value = arg.lstrip("+").partition("=")
        if key == "hydra.searchpath":
            for item in value.strip("[]").split(","):
                item = item.strip().strip("'\"")
                if not item.startswith("file://"):
                    return None
                folders.append(Path(item.removeprefix("file://")))
    return folders


def _hydra_group_options(group: str, conf: Path) -> list[str] | None:
    """The options of one of Hydra's own groups (hydra/launcher: basic, joblib, the installed plugins'), as
    Hydra's search path finds them; None where they cannot be read."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra._internal.utils import create_config_search_path

        loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf)))
        return sorted(loader.get_group_options(group)) or None
    except Exception:  # noqa: BLE001 - Hydra's internals: its own report instead
        return None
