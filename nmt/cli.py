"""What the Hydra entry points share: user mistakes end with one clear message, not a traceback."""

import difflib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from nmt.data.build import EVALUATION_DATA_OPTIONS
from nmt.utils.ranks import first_on_this_machine

# user errors: builtins raised by our own checks (each naming the key or file and what to do), and classes
# named by module, looked up only if their module was loaded (an error cannot come from a module that was
# not imported), so that translate.py or serve.py never import Lightning just to catch its exceptions
BUILTIN_USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    FloatingPointError,
)
NAMED_USER_ERRORS = (
    ("nmt.training.config", "ConfigError"),
    ("nmt.inference.checkpoint", "CheckpointError"),
    ("nmt.training.checkpoint_io", "CheckpointWriteError"),
    ("nmt.data.sources", "DataNotFoundError"),
    ("lightning.fabric.utilities.exceptions", "MisconfigurationException"),  # Lightning's check of trainer.*
)


# errors whose message is a head line, then one line per problem (ConfigError) or per place tried with the
# fix last (DataNotFoundError): all of it is the message, not only its head
LISTING_ERRORS = ("ConfigError", "DataNotFoundError")


def user_errors() -> tuple[type, ...]:
    named = [getattr(sys.modules[module], name) for module, name in NAMED_USER_ERRORS if module in sys.modules]
    return (*BUILTIN_USER_ERRORS, *named, MissingMandatoryValue)


def user_message(err: BaseException) -> str:
    """One line for a user error (the first line of the exception's own message, or a hint)."""
    if isinstance(err, MissingMandatoryValue):
        key = getattr(err, "full_key", None) or "a key"
        return f"{key} is required and has no value: add {key}=... to the command line"
    if isinstance(err, OSError) and err.filename:
        return f"{err.filename}: {err.strerror}"
    text = str(err).strip()
    if type(err).__name__ in LISTING_ERRORS:  # every problem (or place tried), on one line
        head, *problems = text.splitlines()
        return f"{head} " + "; ".join(p.strip() for p in problems)
    return text.splitlines()[0] if text else type(err).__name__


CONF = Path(__file__).resolve().parents[1] / "conf"


def run_cli(function: Callable, cfg) -> None:
    """Call ``function(cfg)``; a user error prints 'error: <message>' and exits with status 2
    (set NMT_DEBUG=1 to see the traceback)."""
    try:
        function(cfg)
    except (BrokenPipeError, ConnectionResetError):  # a socket's reader that left with lines unread: a reset
        if not _stdout_closed():  # another pipe or connection (a worker's): a fault of its own
            raise
        # the reader of standard output went away (translate.py ... | head, or a socket's peer): quiet, as a
        # command killed by SIGPIPE, and nothing more written (the interpreter's last flush would raise again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(128 + 13) from None
    except KeyboardInterrupt:  # Ctrl-C where no stage of the command handles it (preparing data, reading a model)
        if os.environ.get("NMT_DEBUG"):
            raise
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as err:
        if not isinstance(err, user_errors()):
            raise
        if os.environ.get("NMT_DEBUG"):
            raise
        # a check fails alike in every process of a DDP run on one machine: said once there, by the first, in
        # one write (the processes' copies ran together on one line); each machine says its own
        if first_on_this_machine():
            sys.stderr.write(f"error: {user_message(err)}\n")
            sys.stderr.flush()
        raise SystemExit(2) from None


def _stdout_closed() -> bool:
    """Whether standard output is a pipe or socket whose reader has closed it (poll reports an error on it,
    or a socket's hang-up)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # no poll (Windows), or stdout without a descriptor
        return False


def _keys(node, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig

    keys = []
    for key in node.keys() if isinstance(node, DictConfig) else ():
        path = f"{prefix}{key}"
        keys.append(path)
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys += _keys(child, path + ".")
    return keys


def unknown_key_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line for a switch given another word than true or false (:func:`_switch_message`), or for the
    first ``key=value`` of ``argv`` whose key is neither a config group nor a key of the composed config
    (for a sweep, of the config Hydra composes first), with the closest known names (Hydra itself would
    suggest ``+key=value``, which adds a key that nothing reads). None when every key is known, or when
    composing fails for another reason (Hydra then reports that one)."""
    from hydra import compose, initialize_config_dir
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
    except Exception:  # a bad group option or the like: Hydra's own message names it
        return None
    known = _keys(cfg)
    # ++key=value sets a key as key=value does: its switch checked too
    switch = _switch_message(cfg, [*items, *(a.lstrip("+") for a in argv if a.startswith("++") and "=" in a)])
    if switch:
        return switch
    first_keys = _keys(first) if first is not None else known
    for key in plain:
        group = key.split(".")[0]
        if key in known and key not in first_keys and group in swept:
            value = next(a.partition("=")[2] for a in items if a.lstrip("~").partition("=")[0] == key)
            return (
                f"error: {key!r} (on the command line): a sweep's config is composed first with "
                f"{group}={first_choices.get(group)} (the default), which has no such key, and with {group}="
                f"{swept[group]} only after; write ++{key}={value} to set it in every run (every level of {group} "
                "must then take it)"
            )
        if key in known or (group in swept and key in first_keys):
            continue  # a key of the default and of some levels: the sweep's plan names the levels without it
        owners = _other_options_with(key, conf, groups)
        close = _closest(key, list(dict.fromkeys(known + groups)))
        group = key.split(".")[0]
        parent, _, option = key.rpartition(".")
        if parent == "validation.search" and option in _search_options():  # a block that lists its defaults only
            return (
                f"error: {key!r} (on the command line): validation.search takes every search option, but lists "
                f"only those it sets: add this one with +{key}=... ({_search_readers(option)})"
            )
        keys = [k for k in known if k.startswith(f"{group}.")]
        opened = _checkpoint_use(config_name, conf) is not None and key.startswith(OPEN_BLOCKS.get(config_name, ()))
        taken = [f"data.{k}" for k in EVALUATION_DATA_OPTIONS]  # evaluate.py's, listed in its block or not
        if opened and keys and key in taken:  # it lists some of them, and takes the others with +
            hint = f"{config_name}.py's {group} block lists only {', '.join(keys)}; give this one with +{key}=..."
        elif opened and keys:  # a key it refuses, even with +: a misspelling of one it takes, or all of them
            close = difflib.get_close_matches(key, taken, n=1, cutoff=0.85)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else f"an evaluation keeps the run's other {group} settings; {config_name}.py takes these of a "
                f"run's {group} keys: {', '.join(taken)}"
            )
        elif owners and choices.get(group) is None and keys:  # not a group here: the config's own block of that name
            hint = f"{config_name}.py's {group} block takes only {', '.join(keys)}"
        elif owners and choices.get(group) is not None:
            hint = f"it is a key of {' or '.join(f'{group}={o}' for o in owners)}, not of {group}={choices.get(group)}"
        elif close:
            hint = f"did you mean {' or '.join(repr(c) for c in close)}?"
        else:
            hint = "no key or group has a similar name"
        # a search option's block takes the options it lists: a new key there is refused, not added; nor is a
        # key of another option of a group added to this one (the group's own check refuses it)
        adds = "" if parent in ("decode", "validation.search") or owners else f"; +{key}=... adds a new key"
        lists = "the groups"
        if _checkpoint_use(config_name, conf) is not None:  # keys of its own, no groups: an added key is refused
            lists = "its keys"
            adds = ""  # evaluate.py's data keys given with +: said in the hint
        return (
            f"error: {key!r} (on the command line) is neither a key of the {config_name} config nor a config "
            f"group: {hint} (python {config_name}.py --help lists {lists}{adds})"
        )
    return None


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


LAUNCHERS = ("basic", "joblib", "submitit_local", "submitit_slurm")


def launcher_key_message(argv: list[str], conf: Path = CONF) -> str | None:
    """One line for ``hydra.launcher.<key>=...`` where the chosen launcher has no such key (``n_jobs`` without
    ``hydra/launcher=joblib``), naming the installed launchers that have it; Hydra's own message is five lines
    that do not say which launcher to choose. A key under one the launcher has is left to Hydra (``+``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    given = [a.partition("=")[0] for a in argv if a.startswith("hydra.launcher.") and "=" in a]
    if not given or GlobalHydra.instance().is_initialized():
        return None
    chosen = next((a.partition("=")[2] for a in argv if a.startswith("hydra/launcher=")), "basic")

    def keys_of(launcher: str) -> set | None:
        try:
            cfg = compose("sweep", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
        except Exception:  # a launcher not installed (submitit is optional), or a bad option: Hydra says which
            return None
        return set(cfg.hydra.launcher)

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        own = keys_of(chosen)
        if own is None:
            return None
        for key in given:
            name = key.removeprefix("hydra.launcher.").split(".")[0]
            if name in own:
                continue
            owners = [o for o in LAUNCHERS if o != chosen and name in (keys_of(o) or ())]
            hint = f"choose {' or '.join(f'hydra/launcher={o}' for o in owners)}" if owners else (
                f"no installed launcher has {name}")  # fmt: skip
            return f"error: {key!r} (on the command line) is not a key of hydra/launcher={chosen}: {hint}"
    return None


def _closest(key: str, names: list[str]) -> list[str]:
    """Up to three of ``names`` like ``key`` (difflib's ratio at least 0.6), only those nearly as like it as
    the likest: ``decode.beam_sise`` suggests ``decode.beam_size``, not ``decode.seed`` beside it."""
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    best = difflib.SequenceMatcher(None, key, close[0]).ratio() if close else 0.0
    return [name for name in close if difflib.SequenceMatcher(None, key, name).ratio() >= best - 0.1]


def _search_options() -> list[str]:
    from nmt.decoding.settings import SearchConfig

    return list(SearchConfig.__dataclass_fields__)


def _search_readers(option: str) -> str:
    from nmt.decoding.settings import readers

    return readers(option, "validation.search")


def _other_options_with(key: str, conf: Path, groups: list[str]) -> list[str]:
    """For ``group.sub.key``: the options of that config group whose file sets ``sub.key`` (``model.num_heads``
    is a key of model=transformer), so that a key of another option is named as such."""
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


def foreign_group_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line for a training group (``pos=rope``, ``+model=rnn``) given to a program whose config has no
    such group (translate, evaluate, serve, export: the checkpoint's own settings apply). Hydra suggested
    ``+pos=rope``, which was then accepted and read by nothing. None for train.py and sweep.py (whose
    defaults take the groups)."""
    config = _checkpoint_use(config_name, conf)
    if config is None:  # a config of groups (train: model, pos, recipe, ...), or built on one (sweep)
        return None
    for arg in argv:
        key, sep, _ = arg.lstrip("+~").partition("=")
        if arg.startswith(("-", "hydra")) or not key or "." in key or not (conf / key).is_dir():
            continue
        block = f"; its {key} block takes {key}.<key>=..." if key in config else ""
        return (
            f"error: {arg} (on the command line): {config_name}.py takes no {key} group, the checkpoint's own "
            f"settings apply{block} (its options: python {config_name}.py --help)"
        )
    return None


def _checkpoint_use(config_name: str, conf: Path) -> DictConfig | None:
    """The config of a program that uses a checkpoint (translate, evaluate, serve, export: keys of its own, no
    groups but Hydra's), None for train.py and sweep.py."""
    config = OmegaConf.load(conf / f"{config_name}.yaml")
    defaults = config.get("defaults") or []
    if any(isinstance(d, str) and d != "_self_" for d in defaults):
        return None
    groups = {re.sub(r"^(override|optional)\s+", "", str(k)) for d in defaults if isinstance(d, DictConfig) for k in d}
    return None if any(not group.startswith("hydra/") for group in groups) else config


# where a checkpoint-using program takes keys its config does not list: evaluate.py's data overrides (a
# data=files run's +data.test=PATH)
OPEN_BLOCKS = {"evaluate": ("data.",)}


def checkpoint_use_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line, for translate.py, evaluate.py, serve.py and export.py, for a key given null that takes a value
    (``output=null``, ``device=null``, ``decode=null``: tracebacks at the first use), or a key added with ``+``
    that the program does not read (``+beam_size=1`` was taken, and read by nothing)."""
    config = _checkpoint_use(config_name, conf)
    if config is None:
        return None
    defaults = OmegaConf.to_container(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]))
    known = _keys(OmegaConf.create(defaults))
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if arg.startswith(("-", "~")) or not sep or key.startswith("hydra"):
            continue
        if arg.startswith("+") and key not in known:
            if key.startswith((*OPEN_BLOCKS.get(config_name, ()), "decode.")):  # decode: a search option's check
                continue
            close = _closest(key, [k for k in known if "." in k or not isinstance(defaults.get(k), dict)])
            hint = f": did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            return (
                f"error: {arg} (on the command line): {config_name}.py reads the keys of its config alone, and a key "
                f"added with + is read by nothing{hint} (python {config_name}.py --help lists them)"
            )
        if not re.fullmatch(r"(?i)null", value) or key not in known:
            continue
        default = defaults
        for part in key.split("."):
            default = default[part]
        if default is None:
            continue
        if isinstance(default, dict):
            return (
                f"error: {key}=null (on the command line): {key} is a block of options, not a value: set them one "
                f"by one ({key}.<option>=...)"
            )
        if default == "???":
            what = f"{config_name}.py needs it"
        else:
            what = f"leave it out for its default ({default})"
        return f"error: {key}=null (on the command line): {key} takes a value, not null; {what}"
    return None


def multirun_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line where translate.py, evaluate.py, serve.py or export.py is given Hydra's multirun (``-m``, or a
    comma list, for which Hydra's own message suggests ``-m``): ``evaluate.py split=test decode.beam_size=1,3
    -m`` scored both on the test set, round the rule that a decoding grid is chosen on validation."""
    if _checkpoint_use(config_name, conf) is None:
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    grid = "evaluate.py scores the values of a list on the validation set, then chooses one"
    if any(arg in ("-m", "--multirun") for arg in argv):
        how = f"; {grid} (decode.beam_size=[4,5] split=val)" if config_name == "evaluate" else ""
        return f"error: -m (on the command line): {config_name}.py runs once, not a multirun{how}"
    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            swept = parser.parse_override(arg).is_sweep_override()
        except Exception:  # noqa: BLE001 - Hydra says what it cannot read
            continue
        if swept:
            return f"error: {arg} (on the command line): {_one_run_advice(arg, config_name, grid)}"
    return None


def _one_run_advice(arg: str, config_name: str, grid: str) -> str:
    """What a program of a checkpoint, given ``key=a,b``, takes instead: a list in brackets where the key
    takes one (a decoding grid, an ensemble, several test sets), else a quoted value with its comma."""
    given, _, value = arg.partition("=")
    key = given.lstrip("+~")
    listed = f"{given}=[{value}]" if "(" not in value else f"{given}=[a,b,...]"
    said = f"Hydra reads it as the sweep of a multirun, which {config_name}.py does not run; "
    if key == "average_last" or key.startswith("decode."):
        if config_name == "evaluate":
            return said + f"give a list, {listed}, with split=val: {grid}"
        return said + f"give one value ({grid})"
    if key in LIST_KEYS.get(config_name, ()):
        return said + f"a list is written in brackets: {listed}"
    return f"a value holding a comma is quoted ({given}='{value}'); unquoted, {said.removesuffix('; ')}"


# the keys of a program of a checkpoint that take a list: an ensemble's checkpoints, several sets to score,
# the sentences whose attention to draw
LIST_KEYS = {
    "evaluate": ("split", "attention_maps"),
    "translate": ("ckpt_path",),
    "serve": ("ckpt_path",),
}


def unknown_option_message(argv: list[str], conf: Path = CONF) -> str | None:
    """One line for the first ``group=option`` of ``argv`` whose option has no file in the group (Hydra's own
    report spans a screen: the search path, the options, a hint about a stack trace), listing the valid ones.
    Values with Hydra's sweep syntax (choice(...), glob(...), ...) are left to Hydra."""
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        group = conf / key
        hydras = key.startswith("hydra/")  # hydra/launcher=...: Hydra's groups and its plugins' options
        if not sep or arg.startswith(("-", "~")) or not key or not (hydras or group.is_dir()) or key == "hydra":
            continue
        if key.startswith("hydra.") or not re.fullmatch(r"[\w./-]+(,[\w./-]+)*", value):
            continue
        options = _hydra_group_options(key, conf) if hydras else None
        if hydras and not options:
            continue  # not read here: Hydra's own report
        if not hydras:
            options = sorted(str(p.relative_to(group).with_suffix("")) for p in group.rglob("*.yaml"))
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
                return (
                    f"error: {key}={option} (on the command line): not an option of group {key}{hint}; "
                    f"valid: {', '.join(options)}"
                )
    return None


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


# characters of Hydra's override grammar that a sweep's run folders hold (pos=rope,seed=1)
GRAMMAR_CHARACTERS = re.compile(r"[=,\[\]{}()' \"]")


def quoted_paths(argv: list[str]) -> list[str]:
    """``key=value`` whose value is an existing file or folder with characters of Hydra's grammar in its
    name (``ckpt_path=sweeps/pos/pos=rope,seed=1``), quoted so that Hydra reads it as one path (it would
    otherwise fail on the ``=``, or read a list at the ``,``)."""
    quoted = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and not arg.startswith(("-", "~")) and GRAMMAR_CHARACTERS.search(value) and "'" not in value:
            if not value.startswith(("[", '"')) and Path(value).expanduser().exists():
                arg = f"{key}='{value}'"
            elif value.startswith("[") and value.endswith("]") and (paths := _existing_paths(value[1:-1])):
                listed = ",".join(f"'{p}'" for p in paths)
                arg = f"{key}=[{listed}]"  # an ensemble of sweep runs' checkpoints
        quoted.append(arg)
    return quoted


def _existing_paths(items: str) -> list[str] | None:
    """``a,b,c`` read as existing paths whose names may hold commas (``pos=rope,seed=1/best.ckpt``): each
    path the shortest run of comma-separated parts that exists; None unless every part belongs to one."""
    paths, parts = [], []
    for part in items.split(","):
        parts.append(part)
        if Path(",".join(parts)).expanduser().exists():
            paths.append(",".join(parts))
            parts = []
    if parts or not any(GRAMMAR_CHARACTERS.search(p) for p in paths):
        return None  # a part no path takes, or paths Hydra reads as written
    return paths


def _given_run_dir(argv: list[str]) -> str | None:
    """train.py's ``run_dir`` as the command line gives it (the last one), None where Hydra chooses the folder:
    none given, null, or a multirun's."""
    given = [a.partition("=")[2] for a in argv if a.lstrip("+").startswith("run_dir=")]
    if not given or given[-1] in ("", "null") or any(a in ("-m", "--multirun") for a in argv):
        return None
    return given[-1]


def hydra_dir_from_run_dir(argv: list[str]) -> list[str]:
    """train.py given ``run_dir=...``: Hydra's own output (``.hydra/``, the log) goes into that folder too, as a
    sweep's runs do, not into a second folder under ``runs/`` of the working directory."""
    given = _given_run_dir(argv)
    if given is None or any("hydra.run.dir=" in a for a in argv):
        return argv
    folder = Path(given.strip("'\"")).expanduser()
    if _file_in_the_way(folder):
        return argv  # refused by run_dir_message before Hydra makes a folder of its own for the run
    # run_dir expands ~ itself; Hydra would make a folder named "~" in the working directory
    home = given.strip("'\"").startswith("~") and "'" not in str(folder)
    extra = [f"hydra.run.dir='{folder}'" if home else f"hydra.run.dir={given}"]
    if (folder / "fingerprint.json").is_file():
        extra.append(
            "hydra.output_subdir=null"
        )  # a run's folder: its record is not rewritten by a command it may refuse
    return [*argv, *extra]


def _file_in_the_way(folder: Path) -> bool:
    return any(p.exists() and not p.is_dir() for p in (folder, *folder.parents))


def run_dir_message(argv: list[str]) -> str | None:
    """train.py's ``run_dir`` where a file stands (the folder or one of its parents), said before Hydra starts:
    Hydra would otherwise make a folder of its own for the refused run (``runs/<name>/<date>/``)."""
    given = _given_run_dir(argv)
    if given is None:
        return None
    folder = Path(given.strip("'\"")).expanduser()
    if not _file_in_the_way(folder):
        return None
    return f"error: run_dir={folder}: a file stands where the run folder or one of its parents should be"


def unparsable_message(argv: list[str]) -> str | None:
    """An argument Hydra's override grammar cannot read, in one line saying what to do, for Hydra's bare "no
    viable alternative at input": a value the shell split at its spaces (a brace or bracket left open; its
    other words are then arguments of their own), or a list item key=value left unquoted (level_settings)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:  # flags (-m, --help); the words of a split value come after it
            continue
        try:
            parser.parse_overrides([arg])
        except OverrideParseException as err:
            key, _, value = arg.partition("=")
            example = (
                "\"level_settings={optim: {adam: ['optim.optimizer.lr=0.001'], noam: ['warmup=400']}}\""
                if key.lstrip("+~") == "level_settings"
                else f'"{key}=..."'
            )
            if any(value.count(a) != value.count(b) for a, b in ("{}", "[]", "()")):
                hint = f"the shell split the value at its spaces: quote the whole argument, as {example}"
            elif re.search(r"[\[,]\s*[^'\"\[\]{},\s]+=", value):
                hint = f"quote each key=value item of a list, as {example}"
            else:
                hint = "quote a value that holds spaces or Hydra's special characters (docs/configuration.md)"
            return f"error: {arg}: Hydra cannot read it ({str(err).splitlines()[0]}); {hint}"
    return None


def sweep_settings(conf: Path = CONF) -> set[str]:
    """The keys of a sweep as a whole (where it runs, how it is reported): conf/sweep.yaml's own keys, the
    groups its defaults choose besides train's (grid) and ``+tuned``."""
    config = OmegaConf.load(conf / "sweep.yaml")
    groups = {str(k) for d in config.get("defaults") or [] if isinstance(d, DictConfig) for k in d}
    return {str(k) for k in config if k not in ("defaults", "hydra")} | groups | {"tuned"}


SUBCOMMANDS = ("report", "tune")


def sweep_argument_message(argv: list[str], conf: Path = CONF) -> str | None:
    """One line for a subcommand of sweep.py mistyped (Hydra's "missing EQUAL at '<EOF>'"), or a setting of
    the whole sweep given several values: Hydra made them a factor, so grid=none,rnn ran every cell under each
    grid into one folder, sweep_name=a,b ended on a traceback, report_metric=a,b ran every run twice."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    words = [a for a in argv if a != "-m" and a != "--multirun"]
    if words and words[0] in SUBCOMMANDS:  # after -m: sweep.py reads a subcommand in the first place only
        return (
            f"error: {words[0]}: a subcommand goes first, without -m: python sweep.py {words[0]} {' '.join(words[1:])}"
        )
    if words and not words[0].startswith(("-", "~", "+")) and "=" not in words[0]:
        close = difflib.get_close_matches(words[0], SUBCOMMANDS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return (
            f"error: {words[0]}: not a subcommand of sweep.py{hint} nor key=value; python sweep.py report DIR, "
            "python sweep.py tune DIR --level KEY, or python sweep.py [key=value ...]"
        )
    settings = sweep_settings(conf)
    parser = OverridesParser.create()
    for arg in argv:
        key = arg.lstrip("+~").partition("=")[0]
        if arg.startswith("-") or "=" not in arg or key not in settings:
            continue
        if parser.parse_overrides([arg])[0].is_sweep_override():
            return (
                f"error: {arg}: {key} is a setting of the whole sweep, not a factor: give it one value (a sweep "
                "for each value is a command for each)"
            )
    return None


def check_command_line(config_name: str) -> None:
    """Before Hydra starts: a misspelt group option or key stops the program with one line suggesting the
    right one. Existing paths holding Hydra's grammar are quoted (:func:`quoted_paths`), and train.py's
    ``run_dir`` becomes Hydra's output folder too (:func:`hydra_dir_from_run_dir`)."""
    sys.argv[1:] = quoted_paths(sys.argv[1:])
    if config_name == "train":
        sys.argv[1:] = hydra_dir_from_run_dir(sys.argv[1:])
    if config_name == "sweep" and not any(a.startswith("-") for a in sys.argv[1:]):
        # conf/sweep.yaml runs a sweep without -m as with it, once composed; Hydra, when composing fails
        # (a launcher's key where another launcher is chosen), then blames a comma list for a missing -m
        sys.argv[1:1] = ["-m"]
    message = (
        unparsable_message(sys.argv[1:])
        or foreign_group_message(sys.argv[1:], config_name)
        or unknown_option_message(sys.argv[1:])
        or multirun_message(sys.argv[1:], config_name)
        or checkpoint_use_message(sys.argv[1:], config_name)
        or unknown_key_message(sys.argv[1:], config_name)
        or (sweep_argument_message(sys.argv[1:]) if config_name == "sweep" else None)
        or (launcher_key_message(sys.argv[1:]) if config_name == "sweep" else None)
        or (run_dir_message(sys.argv[1:]) if config_name == "train" else None)
    )
    if message:
        print(message, file=sys.stderr)
        raise SystemExit(2)
