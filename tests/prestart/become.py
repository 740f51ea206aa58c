"""In a fork of the preloaded server (server.py): become the process that the stand-in's command would have
started, then run the command as the interpreter runs a script or a module."""

import builtins
import importlib.machinery
import io
import os
import signal
import sys
import types
import warnings

from refusals import first_path_entry

# the signals a stand-in passes on (sitecustomize.FORWARDED)
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGWINCH")


def become(request: dict, fds: list[int], default_filters: int, imports_set: dict[str, str]) -> None:
    """Make this fork the process of the stand-in's command: its standard streams, folder, environment, import
    path, arguments, signal dispositions and mask, umask and CPU affinity. ``default_filters``: how many of
    the server's warning filters are the interpreter's defaults; ``imports_set``: the variables the preloaded
    imports set in the environment, set here where the command's has none, as its own imports would."""
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    _standard_streams(unbuffered="-u" in request["orig_argv"][1:2] or bool(request["env"].get("PYTHONUNBUFFERED")))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for key, value in imports_set.items():
        os.environ.setdefault(key, value)
    sys.path[:] = [first_path_entry(request), *request["path"]]
    sys.argv[:] = request["argv"]
    sys.executable = request["executable"]
    sys.orig_argv[:] = request["orig_argv"]
    for name in FORWARDED:  # as the stand-in's parent left them, whatever the server's own parent did
        default = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
        signal.signal(getattr(signal, name), signal.SIG_IGN if name in request["ignored"] else default)
    signal.pthread_sigmask(signal.SIG_SETMASK, request["blocked"])
    os.umask(request["umask"])
    os.sched_setaffinity(0, request["affinity"])
    import tempfile

    tempfile.tempdir = None  # TMPDIR is read again
    if "multiprocessing.process" in sys.modules:  # where a spawned child finds a relative main script
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = os.getcwd()
    if "numpy" in sys.modules:  # numpy's global generator is seeded from the system's entropy at import
        sys.modules["numpy"].random.seed()
    options = [o for o in request["env"].get("PYTHONWARNINGS", "").split(",") if o]
    if options:  # after the imports' own filters and before the defaults, as at a fresh start
        imported, defaults = warnings.filters[:-default_filters], warnings.filters[-default_filters:]
        warnings.filters[:] = defaults
        sys.warnoptions[:] = options
        warnings._processoptions(options)
        warnings.filters[:0] = imported
        warnings._filters_mutated()


def _standard_streams(unbuffered: bool) -> None:
    """New standard stream objects on descriptors 0-2, as the interpreter makes them for files and pipes (the
    server's were made for /dev/null: a stream caches what it learnt of its descriptor)."""
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        if fd == 0:
            binary = io.BufferedReader(raw)
        else:
            binary = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            binary,
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=old.line_buffering,
            newline="\n",  # the interpreter's: a "\r\n" read is kept
            write_through=unbuffered and fd != 0,
        )
        stream.mode = "r" if fd == 0 else "w"
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def run(request: dict) -> None:
    """Run the command's script or module in a new __main__ module, as the interpreter does: a script with
    its absolute path as __file__ and as its code's file name, a module through runpy."""
    args = [a for a in request["orig_argv"][1:] if a != "-u"]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    if args[0] == "-m":
        import runpy

        runpy._run_module_as_main(args[1], alter_argv=True)
        return
    path = os.path.abspath(args[0])
    main.__file__, main.__cached__ = path, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec")
    exec(code, main.__dict__)
