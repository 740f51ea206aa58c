"""The test session's preloaded process: it imports what `python train.py` imports on its way to training
(Lightning, most of a small test run's time), then forks a copy of itself for each command that a
stand-in (sitecustomize.py) hands it, and the copy runs the command as a fresh interpreter would: the
stand-in's argv, working folder, environment, import path and standard streams, its signals' defaults, its
exit status. It is a test-session tool only (conftest.py starts one per test worker); nothing of the project
imports it.

A command it cannot run so is refused, and the stand-in starts it as usual: an interpreter option but -u; an
environment that differs from this process's in a variable read as a process starts (START_UP), since the
preloaded modules already read theirs; a checkout other than the
one imported here on the command's import path; a process of a multi-process run that the kernel must tie
to its first process (a fork's parent is this server, not that process). Each refusal is one line of this
process's standard error (conftest.py keeps it in the session's temporary folder).

Run: python tests/prestart/server.py SOCKET_PATH"""

import importlib.machinery
import io
import json
import os
import select
import signal
import socket
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what train.py imports by the time it trains; evaluate.py, translate.py and the rest import less of them
PRELOAD = ("hydra", "omegaconf", "torch", "lightning.pytorch", "nmt.cli", "nmt.training.config", "nmt.training.train")
# the variables read as a process starts or as these modules are imported: Python's own, the locale, the native
# libraries that torch and numpy load (thread pools, allocators, the loader), the modules' own (torch's,
# matplotlib's, a home folder's configuration); a command whose value of one differs from this process's
# starts as usual. Any other is read only as a run goes on. PYTHONPATH and PYTHONWARNINGS a fork applies.
START_UP = tuple(
    "PYTHON LC_ LANG OMP_ GOMP_ MKL_ OPENBLAS_ GOTO BLIS_ VECLIB_ DNNL_ ONEDNN_ TORCH PYTORCH_ CUDA_ NVIDIA_ LD_ "
    "MALLOC_ MPL HOME XDG_ USER NUMEXPR_ NUMBA_".split()
)
APPLIED = ("PYTHONPATH", "PYTHONWARNINGS")
# Intel's OpenMP reads these as it loads: only where it is loaded (torch's CPU build loads GNU's; joblib's
# import sets KMP_INIT_AT_FORK in every process after it)
INTEL_OPENMP = ("KMP_",)
# the signals a stand-in passes on (sitecustomize.FORWARDED)
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGWINCH")


def refusal(request: dict, own_env: dict[str, str], imports_set: dict[str, str]) -> str | None:
    """Why this server cannot run ``request`` as a fresh interpreter would, or None. ``own_env``: this process's
    environment as it started; ``imports_set``: what its imports set in it."""
    start_up = START_UP + (INTEL_OPENMP if "libiomp" in Path("/proc/self/maps").read_text() else ())
    args = request["orig_argv"][1:]
    if args[:1] == ["-u"]:
        args = args[1:]
    if not args or (args[0].startswith("-") and args[0] != "-m") or args == ["-m"]:
        return f"interpreter options {args[:2]}"
    env = request["env"]
    # a process of a multi-process run but the first ties itself to the first where it is its parent
    # (follow_first_process), which a fork's parent, this server, is not
    from nmt.training.run_folder import FIRST_PROCESS
    from nmt.utils.ranks import RANK_VARIABLES

    rank = any(env.get(name, "0") not in ("", "0") for name in RANK_VARIABLES)
    if rank and env.get(FIRST_PROCESS) == str(request["parent"]):
        return "a process of a multi-process run, tied to its first process, its parent"
    if request["executable"] != sys.executable:
        return f"another interpreter, {request['executable']}"
    # as the command's own imports would, the fork sets what the preloaded imports set where it is unset
    own_env = {**own_env, **imports_set}
    differ = sorted(
        key
        for key in set(env) | set(own_env)
        if key.startswith(start_up)
        and key not in APPLIED
        and env.get(key) != own_env.get(key)
        and not (key in imports_set and key not in env)
    )
    if differ:
        return f"environment differs in {differ}"
    path = [first_path_entry(request), *request["path"]]
    for package in ("nmt",):
        found = importlib.machinery.PathFinder.find_spec(package, path)
        here = sys.modules[package].__spec__
        if found is not None and found.origin != here.origin:
            return f"{package} is imported from {found.origin} on that path, {here.origin} here"
    return None


def first_path_entry(request: dict) -> str:
    """sys.path[0] as the interpreter sets it: the script's folder (its links resolved), or the working folder
    for -m."""
    args = [a for a in request["orig_argv"][1:] if a != "-u"]
    if args[0] == "-m":
        return request["cwd"]
    return os.path.dirname(os.path.realpath(os.path.join(request["cwd"], args[0])))


def serve(address: str, own_env: dict[str, str], imports_set: dict[str, str]) -> tuple[dict, list[int]]:
    """Answer stand-ins until killed; in each forked copy, return the request it is to run and its streams.
    ``own_env`` and ``imports_set``: as refusal takes them."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".binding")
    listener.listen(64)
    os.rename(address + ".binding", address)  # connectable only now that everything is imported
    stand_ins: dict[socket.socket, int] = {}  # a stand-in's connection -> its run's pid
    ends: dict[int, tuple[int, socket.socket]] = {}  # a run's pidfd -> (its pid, its stand-in's connection)
    while True:
        readable, _, _ = select.select([listener, *stand_ins, *ends], [], [])
        for ready in readable:
            if ready is listener:
                connection, _ = listener.accept()
                try:
                    header, fds, _, _ = socket.recv_fds(connection, 8, 3)
                    request = json.loads(receive(connection, int.from_bytes(header, "big")))
                except (OSError, ValueError) as err:
                    print(f"prestart: a request unread: {err}", file=sys.stderr, flush=True)
                    connection.close()
                    continue
                reason = refusal(request, own_env, imports_set)
                if reason is not None:
                    print(
                        f"prestart: {' '.join(request['orig_argv'][1:4])} ... started as usual: {reason}",
                        file=sys.stderr,
                        flush=True,
                    )
                    answer(connection, 0)
                    connection.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for other in [connection, *stand_ins]:
                        other.close()
                    for pidfd in ends:
                        os.close(pidfd)
                    return request, fds
                for fd in fds:
                    os.close(fd)
                ends[os.pidfd_open(pid)] = (pid, connection)
                stand_ins[connection] = pid
                answer(connection, pid)
            elif ready in stand_ins:  # a stand-in says nothing more: readable means it is gone
                pid = stand_ins.pop(ready)
                if not ready.recv(1):
                    try:  # as its own SIGKILL would have
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            else:
                pid, connection = ends.pop(ready)
                os.close(ready)
                _, status = os.waitpid(pid, 0)
                stand_ins.pop(connection, None)
                answer(connection, status)
                connection.close()


def answer(connection: socket.socket, value: int) -> None:
    try:
        connection.sendall(value.to_bytes(8, "big", signed=True))
    except OSError:  # the stand-in is gone
        pass


def receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("the stand-in closed its connection")
        data += chunk
    return data


def become(request: dict, fds: list[int], default_filters: int, imports_set: dict[str, str]) -> None:
    """Make this fork the process the stand-in's command would have started. ``imports_set``: the variables
    that the preloaded imports set in the environment, as they would in the command's own."""
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for key, value in imports_set.items():
        os.environ.setdefault(key, value)
    sys.path[:] = [first_path_entry(request), *request["path"]]
    sys.argv[:] = request["argv"]
    sys.orig_argv[:] = request["orig_argv"]
    for name in FORWARDED:  # as the stand-in's parent left them, whatever this server's own parent did
        default = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
        signal.signal(getattr(signal, name), signal.SIG_IGN if name in request["ignored"] else default)
    import tempfile

    tempfile.tempdir = None  # TMPDIR is read again
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
    if "-u" in request["orig_argv"][1:2] or request["env"].get("PYTHONUNBUFFERED"):
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            unbuffered = io.TextIOWrapper(
                io.FileIO(fd, "wb", closefd=False), encoding=stream.encoding, errors=stream.errors, write_through=True
            )
            setattr(sys, name, unbuffered)
            setattr(sys, f"__{name}__", unbuffered)


def run(request: dict) -> None:
    import runpy

    args = [a for a in request["orig_argv"][1:] if a != "-u"]
    if args[0] == "-m":
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    default_filters = len(warnings.filters)
    if sys.warnoptions:
        sys.exit("prestart: the server takes no warning options")
    started_with = dict(os.environ)
    # imported as train.py imports them, once Hydra has given the root logger its handlers: Lightning, imported
    # before that, would give its own loggers a handler of their own (lines of another format, on stderr)
    import logging

    placeholder = logging.NullHandler()
    logging.getLogger().addHandler(placeholder)
    for name in PRELOAD:
        __import__(name)
    logging.getLogger().removeHandler(placeholder)
    imports_set = {k: v for k, v in os.environ.items() if started_with.get(k) != v}
    job, streams = serve(sys.argv[1], started_with, imports_set)
    become(job, streams, default_filters, imports_set)
    run(job)
