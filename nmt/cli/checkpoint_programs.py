"""The programs that use a checkpoint (translate, evaluate, serve, export): keys of their own and no training
groups, one run each (no multirun), lists in brackets."""

import re
import shlex
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.cli.names import closest
from nmt.utils.configs import CONF, dotted_keys


def checkpoint_program(config_name: str, conf: Path) -> DictConfig | None:
    """The config of a program that uses a checkpoint (translate, evaluate, serve, export: keys of its own, no
    groups but Hydra's), None for train.py and sweep.py."""
    config = OmegaConf.load(conf / f"{config_name}.yaml")
    defaults = config.get("defaults") or []
    if any(isinstance(d, str) and d != "_self_" for d in defaults):
        return None
    groups = {re.sub(r"^(override|optional)\s+", "", str(k)) for d in defaults if isinstance(d, DictConfig) for k in d}
    return None if any(not group.startswith("hydra/") for group in groups) else config


def foreign_group_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line for a training group (``pos=rope``, ``+model=rnn``) given to a program whose config has no
    such group (translate, evaluate, serve, export: the checkpoint's own settings apply). Hydra suggested
    ``+pos=rope``, which was then accepted and read by nothing. None for train.py and sweep.py (whose
    defaults take the groups)."""
    config = checkpoint_program(config_name, conf)
    if config is None:  # a config of groups (train: model, pos, recipe, ...), or built on one (sweep)
        return None
    for arg in argv:
        key, sep, _ = arg.lstrip("+~").partition("=")
        group, dot, _ = key.partition(".")
        if arg.startswith(("-", "hydra")) or not key or not (conf / group).is_dir() or (dot and group in config):
            continue
        # a key of a training group's node (smoothing.smoothing=0.2) was offered that group as a near name
        what = f"no {group} group, nor its keys" if dot else f"no {group} group"
        block = f"; its {group} block takes {group}.<key>=..." if group in config else ""
        return (
            f"error: {arg} (on the command line): {config_name}.py takes {what}, the checkpoint's own "
            f"settings apply{block} (its options: python {config_name}.py --help)"
        )
    return None


# where a checkpoint-using program takes keys its config does not list: evaluate.py's data overrides (a
# data=files run's +data.test=PATH)
OPEN_BLOCKS = {"evaluate": ("data.",)}
# keys that take null though their default is a value: translate.py's input=null, a language model's targets
# each scored from a sentence start (no prompts)
NULLABLE = {"translate": ("input",)}


def checkpoint_use_message(argv: list[str], config_name: str, conf: Path = CONF) -> str | None:
    """One line, for translate.py, evaluate.py, serve.py and export.py, for a key given null that takes a value
    (``output=null``, ``device=null``, ``decode=null``: tracebacks at the first use), or a key added with ``+``
    that the program does not read (``+beam_size=1`` was taken, and read by nothing)."""
    config = checkpoint_program(config_name, conf)
    if config is None:
        return None
    defaults = OmegaConf.to_container(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]))
    known = dotted_keys(OmegaConf.create(defaults))
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if arg.startswith(("-", "~")) or not sep or key.startswith("hydra"):
            continue
        if key.partition(".")[0] == "decode" and "decode" not in defaults:  # export.py: no search runs here
            return (
                f"error: {arg} (on the command line): {config_name}.py carries the run's own search (its decode "
                "settings, in nmt_export.json); give a search option where the export translates: "
                "CTranslate2Model(...).translate(lines, beam_size=5) (docs/usage.md)"
            )
        if arg.startswith("+") and key not in known:
            if key.startswith((*OPEN_BLOCKS.get(config_name, ()), "decode.")):  # decode: a search option's check
                continue
            close = closest(key, [k for k in known if "." in k or not isinstance(defaults.get(k), dict)])
            hint = f": did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            return (
                f"error: {arg} (on the command line): {config_name}.py reads the keys of its config alone, and a key "
                f"added with + is read by nothing{hint} (python {config_name}.py --help lists them)"
            )
        if not re.fullmatch(r"(?i)null", value) or key not in known or key in NULLABLE.get(config_name, ()):
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
    if config_name == "train":
        return _train_multirun_message(argv)
    if checkpoint_program(config_name, conf) is None:
        return None
    grid = "evaluate.py scores the values of a list on the validation set, then chooses one"
    if any(arg in ("-m", "--multirun") for arg in argv):
        how = f"; {grid} (decode.beam_size=[4,5] split=val)" if config_name == "evaluate" else ""
        return f"error: -m (on the command line): {config_name}.py runs once, not a multirun{how}"
    arg = _first_swept(argv)
    return f"error: {arg} (on the command line): {_one_run_advice(arg, config_name, grid)}" if arg else None


def _set_per_run(arg: str) -> bool:
    """A key a sweep sets for each of its runs (refused on sweep.py's command line), or Hydra's run folder."""
    return arg.lstrip("+~").partition("=")[0] in ("run_dir", "group", "tags", "hydra.run.dir")


def _first_swept(argv: list[str]) -> str | None:
    """The first argument Hydra reads as a sweep (``key=a,b``, ``range(...)``), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            if parser.parse_override(arg).is_sweep_override():
                return arg
        except Exception:  # noqa: BLE001 - Hydra says what it cannot read
            continue
    return None


def _train_multirun_message(argv: list[str]) -> str | None:
    """train.py given a comma list without -m: Hydra's five lines suggested ``key=[a,b]`` (nothing for a
    group) and ``--multirun`` (Hydra's runs one after another, with no report); sweep.py is the way to compare."""
    if any(arg in ("-m", "--multirun") for arg in argv):  # Hydra's multirun of train.py, asked for
        return None
    arg = _first_swept(argv)
    if arg is None:
        return None
    return (
        f"error: {arg} (on the command line): train.py trains one run; runs of several values are a sweep, with a "
        f"report: python sweep.py grid=none {' '.join(shlex.quote(a) for a in argv if not _set_per_run(a))} (or "
        "Hydra's multirun: train.py -m ...; a value holding a comma is quoted: key='a,b')"
    )


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
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from nmt.cli.arguments import quoted_argument

    # as the shell is to be given it (Hydra's quotes inside the shell's): key='a, "b"' typed lost its quotes again
    typed = quoted_argument(OverridesParser.create(), given, value) or shlex.quote(f"{given}='{value}'")
    return f"a value holding a comma is quoted ({typed}); unquoted, {said.removesuffix('; ')}"


# the keys of a program of a checkpoint that take a list: an ensemble's checkpoints, several sets to score,
# the sentences whose attention to draw
LIST_KEYS = {
    "evaluate": ("split", "attention_maps"),
    "translate": ("ckpt_path",),
    "serve": ("ckpt_path",),
}
