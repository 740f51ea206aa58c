"""The command line of the entry points (train, sweep, evaluate, translate, serve, export): checked before Hydra
starts, so that a misspelt key, option or value ends with one line saying what to give, and user errors of
the run itself end with one line too (:func:`run_cli`).

Where each check lives: ``keys`` (keys and group options the config lacks), ``checkpoint_programs`` (the
programs that use a checkpoint), ``sweep_args`` (sweep.py's subcommands, whole-sweep settings, launcher
keys), ``arguments`` (quoting, ``run_dir``, unreadable arguments), ``run`` (user errors while running)."""

import sys

from nmt.cli.arguments import (
    added_default_group_message,
    drop_refused_output,
    hydra_dir_from_run_dir,
    hydra_flags_first,
    quoted_paths,
    run_dir_message,
    unparsable_message,
)
from nmt.cli.checkpoint_programs import checkpoint_use_message, foreign_group_message, multirun_message
from nmt.cli.keys import unknown_key_message, unknown_option_message
from nmt.cli.run import run_cli, user_errors, user_message
from nmt.cli.sweep_args import launcher_key_message, sweep_argument_message, sweep_settings

__all__ = [
    "added_default_group_message",
    "check_command_line",
    "drop_refused_output",
    "checkpoint_use_message",
    "foreign_group_message",
    "hydra_dir_from_run_dir",
    "hydra_flags_first",
    "launcher_key_message",
    "multirun_message",
    "quoted_paths",
    "run_cli",
    "run_dir_message",
    "sweep_argument_message",
    "sweep_settings",
    "unknown_key_message",
    "unknown_option_message",
    "unparsable_message",
    "user_errors",
    "user_message",
]


def check_command_line(config_name: str) -> None:
    """Before Hydra starts: a misspelt group option or key stops the program with one line suggesting the
    right one. Existing paths holding Hydra's grammar are quoted (:func:`quoted_paths`), and train.py's
    ``run_dir`` becomes Hydra's output folder too (:func:`hydra_dir_from_run_dir`)."""
    sys.argv[1:] = quoted_paths(sys.argv[1:])
    sys.argv[1:] = hydra_flags_first(sys.argv[1:])
    if config_name == "train":
        sys.argv[1:] = hydra_dir_from_run_dir(sys.argv[1:])
    if config_name == "sweep" and not any(a.startswith("-") for a in sys.argv[1:]):
        # conf/sweep.yaml runs a sweep without -m as with it, once composed; Hydra, when composing fails
        # (a launcher's key where another launcher is chosen), then blames a comma list for a missing -m
        sys.argv[1:1] = ["-m"]
    message = (
        unparsable_message(sys.argv[1:])
        or added_default_group_message(sys.argv[1:], config_name)
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
