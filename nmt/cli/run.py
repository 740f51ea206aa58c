"""Calling a program's function: a user's mistake ends with one line and status 2, not a traceback."""

import errno
import linecache
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from nmt.utils.configs import unset_variable_message
from nmt.utils.io import DISK_FULL
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
PACKAGE = Path(__file__).resolve().parents[1]  # nmt itself, wherever it is installed


def user_errors() -> tuple[type, ...]:
    named = [getattr(sys.modules[module], name) for module, name in NAMED_USER_ERRORS if module in sys.modules]
    return (*BUILTIN_USER_ERRORS, *named, MissingMandatoryValue)


def user_message(err: BaseException, cfg=None) -> str:
    """One line for a user error (the first line of the exception's own message, or a hint)."""
    if isinstance(err, MissingMandatoryValue):
        key = getattr(err, "full_key", None) or "a key"
        return f"{key} is required and has no value: add {key}=... to the command line"
    if isinstance(err, OSError) and err.filename:
        return f"{err.filename}: {err.strerror}{_in_the_cache(err, cfg)}"
    text = str(err).strip()
    unset = unset_variable_message(err, cfg)  # ${oc.env:NMT_DATA} in a config, the variable unset
    if unset:
        return unset
    key = getattr(err, "full_key", None)
    if isinstance(err, OmegaConfBaseException) and key and text and not text.startswith(str(key)):
        # OmegaConf says which key only on a second line ("full_key: lr"), which one line leaves out
        return f"{key}: {text.splitlines()[0]}"
    if type(err).__name__ in LISTING_ERRORS:  # every problem (or place tried), on one line
        head, *problems = text.splitlines()
        return f"{head} " + "; ".join(p.strip() for p in problems)
    return text.splitlines()[0] if text else type(err).__name__


def said_by_a_check(err: BaseException) -> bool:
    """Whether a user error was raised by a check of this project (a ``raise`` in its code, or an error class
    of its own), or names the file it failed on. A ValueError from inside a library, or from a builtin call
    such as ``zip(strict=True)``, may be a fault rather than a mistake: its one line then says how to see where."""
    if not isinstance(err, BUILTIN_USER_ERRORS) or isinstance(err, OSError) and err.filename:
        return True
    if isinstance(err, OmegaConfBaseException):  # the config as the user wrote it (an interpolation of no key)
        return True
    innermost = err.__traceback__
    while innermost is not None and innermost.tb_next is not None:
        innermost = innermost.tb_next
    if innermost is None:
        return True
    path = innermost.tb_frame.f_code.co_filename
    if _in_a_library(path):
        return False
    return re.search(r"\braise\b", linecache.getline(path, innermost.tb_lineno)) is not None


def _in_a_library(path: str) -> bool:
    """A file of the standard library or an installed package (this project's own code is not installed
    there: an editable install, or the checkout itself)."""
    import sysconfig

    if path.startswith("<") or Path(path).resolve().is_relative_to(PACKAGE):
        return path.startswith("<")
    places = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(place and Path(path).resolve().is_relative_to(Path(place).resolve()) for place in places)


def _in_the_cache(err: OSError, cfg) -> str:
    """What to do where a file error is in the run's cache folder (read-only, or a file where it should be)."""
    try:
        from omegaconf import OmegaConf

        cache = OmegaConf.select(cfg, "cache_dir", default=None) if cfg is not None else None
        if not cache or not Path(err.filename).resolve().is_relative_to(Path(str(cache)).expanduser().resolve()):
            return ""
    except Exception:  # noqa: BLE001  (a config that cannot say its cache: the error as it is)
        return ""
    return f" (in the cache, cache_dir={cache}: give a folder this user can write, cache_dir=... or $NMT_CACHE)"


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
        _ignore_further_interrupts()
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as err:
        if isinstance(err, OSError) and err.errno in DISK_FULL and not os.environ.get("NMT_DEBUG"):
            _say_disk_full(err)
        if not isinstance(err, user_errors()):
            raise
        if os.environ.get("NMT_DEBUG"):
            raise
        # a check fails alike in every process of a DDP run on one machine: said once there, by the first, in
        # one write (the processes' copies ran together on one line); each machine says its own
        if first_on_this_machine():
            hint = "" if said_by_a_check(err) else " (NMT_DEBUG=1 shows where: a fault of this program?)"
            sys.stderr.write(f"error: {user_message(err, cfg)}{hint}\n")
            sys.stderr.flush()
        raise SystemExit(2) from None


def _ignore_further_interrupts() -> None:
    """The command is ending on Ctrl-C: another Ctrl-C (a second press, one a server's shutdown passed on) would
    raise KeyboardInterrupt anywhere on the way out, a traceback and a status of -2 instead of 130."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _say_disk_full(err: OSError) -> None:
    """A full disk (or quota) in one line naming what was being written, and status 2. Standard output is
    pointed at nothing first: the interpreter's last flush would fail to write its buffer again, in a second
    message."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # standard output replaced by an object without a descriptor
        pass
    where = err.filename or "an output"
    # EFBIG: a file larger than the file system takes (FAT's 4 GiB), which freeing space does not change
    todo = (
        "write elsewhere (another file system)" if err.errno == errno.EFBIG else "free some space, or write elsewhere"
    )
    sys.stderr.write(f"error: {where}: {err.strerror or 'no space left'}; {todo}\n")
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
