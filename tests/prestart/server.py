"""The test session's preloaded process: it imports what `python train.py` imports on its way to training
(Lightning: most of a small test run's time), then forks a copy of itself for each command that a stand-in
(sitecustomize.py) hands it, and the copy runs the command as a fresh interpreter would (become.py). A
command a fork cannot run so is refused, and its stand-in starts it as usual (refusals.py); each refusal is
a line of this process's standard error (conftest.py keeps it in the session's temporary folder). A test
session tool only: conftest.py starts two per test worker, and nothing of the project imports it.

Run: python tests/prestart/server.py SOCKET_PATH"""

import gc
import io
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
import warnings

from become import become, run
from refusals import ROOT, refusal
from sitecustomize import receive  # this folder's: here it hands nothing over (no NMT_TEST_PRESTART)

# what train.py imports by the time it trains (and sacremoses, which its scores import as it ends), and
# evaluate.py, translate.py and the rest import less of them
PRELOAD = (
    "hydra",
    "omegaconf",
    "torch",
    "lightning.pytorch",
    "nmt.cli",
    "nmt.training.config",
    "nmt.training.train",
    "sacremoses",
)
PR_SET_PDEATHSIG = 1
HERE = os.path.dirname(os.path.abspath(__file__))


def serve(address: str, own_env: dict[str, str], imports_set: dict[str, str]) -> tuple[dict, list[int]]:
    """Answer stand-ins until killed; in each fork, return the request it is to run and its standard streams.
    ``own_env`` and ``imports_set``: as refusal takes them."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".binding")
    listener.listen(64)
    os.rename(address + ".binding", address)  # connectable only now that everything is imported
    stand_ins: dict[socket.socket, int] = {}  # a stand-in's connection -> its run's pid
    ends: dict[int, tuple[int, socket.socket]] = {}  # a run's pidfd -> (its pid, its stand-in's connection)
    forked: dict[int, tuple[str, float]] = {}  # a run's pid -> (its command, said as refusals are; its start)
    while True:
        readable, _, _ = select.select([listener, *stand_ins, *ends], [], [])
        # the runs whose stand-in died are killed and reaped before this server reads a new command (a test's
        # rerun of a command it has just killed must not meet the killed run still holding its folder; the
        # rerun goes to the other server, which starts it after a new interpreter's start-up, tens of
        # milliseconds, where this one takes one or two)
        for ready in [r for r in readable if r in stand_ins]:
            try:
                gone = not ready.recv(1)  # a stand-in sends nothing more: readable means it is gone
            except OSError:
                gone = True
            if gone:
                pid = stand_ins.pop(ready)
                end = next(pidfd for pidfd, (run_pid, _) in ends.items() if run_pid == pid)
                os.kill(pid, signal.SIGKILL)  # as the stand-in's own SIGKILL would have; not reaped yet: alive
                _, status = os.waitpid(pid, 0)
                said(status, forked.pop(pid))
                del ends[end]
                os.close(end)
                ready.close()
        for ready in [r for r in readable if isinstance(r, int) and r in ends]:
            pid, connection = ends.pop(ready)
            os.close(ready)
            _, status = os.waitpid(pid, 0)
            said(status, forked.pop(pid))
            stand_ins.pop(connection, None)
            answer(connection, status)
            connection.close()
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        fds: list[int] = []
        try:
            header, fds, _, _ = socket.recv_fds(connection, 8, 3)
            request = json.loads(receive(connection, int.from_bytes(header, "big")))
        except (OSError, ValueError) as err:
            print(f"prestart: a request unread: {err}", file=sys.stderr, flush=True)
            connection.close()
            for fd in fds:  # the test's pipes: held here, its reads would never end
                os.close(fd)
            continue
        try:
            reason = refusal(request, own_env, imports_set)
        except Exception as err:  # noqa: BLE001 - a script that does not parse, say: it starts as usual
            reason = f"not read: {err!r}"
        command = " ".join(request["orig_argv"][1:4])
        if reason is not None or len(fds) != 3:
            print(f"prestart: {command} ... started as usual: {reason}", file=sys.stderr, flush=True)
            answer(connection, 0)
            connection.close()
            for fd in fds:
                os.close(fd)
            continue
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other in {connection, *stand_ins, *(c for _, c in ends.values())}:
                other.close()
            for pidfd in ends:
                os.close(pidfd)
            _die_with(server)
            return request, fds
        for fd in fds:
            os.close(fd)
        ends[os.pidfd_open(pid)] = (pid, connection)
        stand_ins[connection] = pid
        forked[pid] = (command, time.monotonic())
        answer(connection, pid)


def warm_hydra() -> None:
    """Do once here what Hydra does the first time in a process and undo its state: find its installed
    plugins (importing them and filling the caches of Python's abstract classes that checking each class
    fills) and compose a config (its override grammar's parser and the rest built on first use): about half
    a second of every forked command that reads a config. The plugins found are forgotten, so that each fork
    finds them again on its own import path, as a fresh interpreter would (cheaply now); the project's own
    plugin folder is kept off the path here, so that only the installed ones, which every command's path
    holds, are imported before a fork."""
    from hydra import compose, initialize_config_dir
    from hydra.core.plugins import Plugins
    from hydra.core.singleton import Singleton
    from hydra.version import VersionBase

    had_version = VersionBase in Singleton._instances
    version = VersionBase.instance().getbase()
    before = set(Singleton._instances)
    path = sys.path[:]
    sys.path[:] = [p for p in path if os.path.realpath(p or ".") != str(ROOT)]  # the checkout's hydra_plugins/
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            compose("train", return_hydra_config=True)
    finally:
        sys.path[:] = path
        for made in set(Singleton._instances) - before:  # the plugins found, the initialised Hydra
            del Singleton._instances[made]
        Singleton._instances.pop(Plugins, None)
        if had_version:
            VersionBase.instance().version_base = version
        else:
            del Singleton._instances[VersionBase]


def said(status: int, command: tuple[str, float]) -> None:
    """A line for each forked command as it ends: how long it took and how it ended (the log then counts what
    the preloading served, beside what it refused)."""
    name, started = command
    end = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.waitstatus_to_exitcode(status)}"
    print(f"prestart: {name} ... forked, {end} after {time.monotonic() - started:.2f} s", file=sys.stderr, flush=True)


def _die_with(server: int) -> None:
    """A fork ends when the server does (the session's end), as it would with its stand-in."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:
        os._exit(137)


def exit_status(exit: SystemExit) -> int:
    """The status the interpreter ends with for an uncaught SystemExit (another object than a number said)."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def leave(code: int, interrupted: bool) -> None:
    """End as the interpreter ends, without unloading the preloaded modules: that touches every object, and a
    fork copies each page it touches (over a second for a command of a few milliseconds). As the interpreter
    does: wait for the threads, run the atexit functions, flush the files left open (as their release would),
    then end, by SIGINT after an uncaught KeyboardInterrupt."""
    import atexit
    import gc
    import threading

    for step in (threading._shutdown, atexit._run_exitfuncs):
        try:
            step()
        except BaseException:  # a Ctrl-C while waiting for the threads: said, and the end goes on, as there
            print(f"Exception ignored in: {step.__module__}.{step.__name__}", file=sys.stderr)
            traceback.print_exc()
    standard = [sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__]
    for stream in standard:  # first: the files closed below must not take a standard stream's layers along
        try:
            if stream is not None and stream.writable():
                stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed pipe: the interpreter goes on to end too
            pass
    layers = {id(s) for s in standard}
    for stream in standard:
        while stream is not None:  # its buffer, then that one's raw file
            layers.add(id(stream))
            stream = getattr(stream, "buffer", None) or getattr(stream, "raw", None)
    made = [o for o in gc.get_objects() if isinstance(o, io.IOBase)]  # since the fork (the preloaded: frozen)
    for layer in (io.TextIOBase, io.BufferedIOBase, io.IOBase):  # a file's text first, its raw descriptor last
        for stream in made:
            if isinstance(stream, layer) and id(stream) not in layers:
                try:
                    if not stream.closed:
                        stream.close()
                except Exception:  # noqa: BLE001, S110 - as a release at exit, which ignores them
                    pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def answer(connection: socket.socket, value: int) -> None:
    try:
        connection.sendall(value.to_bytes(8, "big", signed=True))
    except OSError:  # the stand-in is gone
        pass


if __name__ == "__main__":
    default_filters = len(warnings.filters)
    if sys.warnoptions:
        sys.exit("prestart: the server takes no warning options")
    started_with = dict(os.environ)
    # imported as train.py imports them, once Hydra has given the root logger its handlers: Lightning, imported
    # before that, gives its own loggers a handler of their own (lines of another format, on stderr); commands
    # that import it as they start are refused (refusals.lightning_first)
    import logging

    placeholder = logging.NullHandler()
    logging.getLogger().addHandler(placeholder)
    for name in PRELOAD:
        __import__(name)
    warm_hydra()
    logging.getLogger().removeHandler(placeholder)
    imports_set = {k: v for k, v in os.environ.items() if started_with.get(k) != v}
    gc.freeze()  # the preloaded objects: never collected, so a fork's collections leave their pages shared
    job, streams = serve(sys.argv[1], started_with, imports_set)
    del sys.modules["become"], sys.modules["refusals"]  # nothing of the server's for the command to import
    become(job, streams, default_filters, imports_set)
    code, interrupted = 0, False
    try:
        run(job)
    except SystemExit as exit:
        code = exit_status(exit)
    except BaseException as err:  # said as the interpreter says it, without this file's frames and become.py's
        tb = err.__traceback__
        while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == HERE:
            tb = tb.tb_next
        sys.excepthook(type(err), err.with_traceback(tb), tb)  # the interpreter prints the exception's own
        code, interrupted = 1, isinstance(err, KeyboardInterrupt)
    leave(code, interrupted)
