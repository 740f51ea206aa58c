"""What the Hydra entry points share: user mistakes end with one clear message, not a traceback."""

import os
import sys
from collections.abc import Callable

from nmt.checkpoint import CheckpointError
from nmt.config import ConfigError
from nmt.data.sources import DataNotFoundError

USER_ERRORS = (ConfigError, CheckpointError, DataNotFoundError, ValueError, FileNotFoundError)


def run_cli(function: Callable, cfg) -> None:
    """Call ``function(cfg)``; a user error prints 'error: <message>' and exits with status 2
    (set NMT_DEBUG=1 to see the traceback)."""
    try:
        function(cfg)
    except USER_ERRORS as err:
        if os.environ.get("NMT_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
