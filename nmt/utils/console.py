"""The rich console the project prints its tables with."""

import os
import sys

from rich.console import Console

# a log read later (train.py ... | tee run.log) is not a terminal: rich's 80 columns there broke headers in two,
# wrapped a row over many lines and split a sacreBLEU signature that a reader copies; a terminal (or COLUMNS)
# keeps its own width
LOG_WIDTH = 140


def console(stderr: bool = False) -> Console:
    """A console on standard output (or error) as wide as its terminal, or LOG_WIDTH where it is none."""
    stream = sys.stderr if stderr else sys.stdout
    terminal = "COLUMNS" in os.environ or (hasattr(stream, "isatty") and stream.isatty())
    return Console(stderr=stderr, width=None if terminal else LOG_WIDTH)
