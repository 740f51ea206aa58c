"""The test session's commands start preloaded: a `python train.py ...` (or any script, or ``-m`` module)
that a test, or a sweep or benchmark under test, starts hands its command to one of the session's preloaded
processes (server.py), which forks a copy of itself to run it; this process stays as the command's
stand-in.

Python imports this module as it starts, before the script, wherever this folder is on PYTHONPATH (the test
session puts it there). Without ``NMT_TEST_PRESTART`` in the environment, or for a command that a fork
cannot run as a fresh interpreter would (refusals.py), it does nothing and the command starts as usual.

The stand-in keeps what a test reads of a process: its pid takes the signals sent to it and passes them on
to the run, it ends as the run ends (the same exit status, or the same signal), and a SIGKILL of it is a
SIGKILL of the run (the server watches its connection). The run writes to the stand-in's own standard
streams, handed over with the command. The session's two servers per worker take the commands in turn, so
that two commands in a row differ in their string hashing seed, as fresh processes do."""

import os
import sys

ADDRESS = "NMT_TEST_PRESTART"
# the signals passed on to the run: every one that a test, a sweep or a terminal sends to end or tell a run
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGWINCH")


def _runnable() -> bool:
    """A script or a module, with no interpreter option but -u, and no terminal among the standard streams
    (a terminal's own Ctrl-C reaches the whole process group, which a stand-in cannot pass on)."""
    args = sys.orig_argv[1:]
    if args[:1] == ["-u"]:
        args = args[1:]
    if not args or (args[0].startswith("-") and args[0] != "-m"):
        return False
    return not any(os.isatty(fd) for fd in (0, 1, 2))


def _server(addresses: list[str]) -> str:
    """The servers in turn: a counter beside the first one's socket, taken under a lock."""
    import fcntl

    fd = os.open(os.path.join(os.path.dirname(addresses[0]), "turn"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        turn = int(os.read(fd, 32) or b"0")
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, str(turn + 1).encode().ljust(32))
    finally:
        os.close(fd)
    return addresses[turn % len(addresses)]


def _hand_over(addresses: list[str]) -> None:
    import json
    import signal
    import socket

    passed = []  # descriptors this process was given beyond 0-2 (a fork gets only those)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                passed.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    umask = os.umask(0)
    os.umask(umask)
    request = json.dumps(
        {
            "executable": sys.executable,
            "orig_argv": sys.orig_argv,
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "path": sys.path,
            "passed_fds": passed,
            # what a fresh process keeps from its parent (a shell's background job ignores SIGINT)
            "ignored": [name for name in FORWARDED if signal.getsignal(getattr(signal, name)) is signal.SIG_IGN],
            "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            "umask": umask,
            "affinity": sorted(os.sched_getaffinity(0)),
        }
    ).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(_server(addresses))
        socket.send_fds(connection, [len(request).to_bytes(8, "big")], [0, 1, 2])
        connection.sendall(request)
        run = int.from_bytes(receive(connection, 8), "big", signed=True)
    except OSError:
        connection.close()
        return
    if run <= 0:  # refused: started as usual
        connection.close()
        return
    try:  # the run exists: whatever happens now, this process never starts the command itself

        def forward(signum, frame):
            try:
                os.kill(run, signum)
            except ProcessLookupError:
                pass

        for name in FORWARDED:
            if signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:
                signal.signal(getattr(signal, name), forward)
        status = int.from_bytes(receive(connection, 8), "big", signed=True)
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            if signum != signal.SIGKILL:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
            os.kill(os.getpid(), signum)
            os._exit(128 + signum)
        os._exit(os.waitstatus_to_exitcode(status))
    except BaseException as err:  # noqa: BLE001 - the server died with the run, or a bug here: said, never rerun
        os.write(2, f"prestart: lost the preloaded run {run} ({err!r})\n".encode())
    finally:
        os._exit(70)


def receive(connection, size: int) -> bytes:
    """``size`` bytes from ``connection`` (server.py's too)."""
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("the preloaded process closed the connection")
        data += chunk
    return data


if os.environ.get(ADDRESS) and _runnable():
    _hand_over(os.environ[ADDRESS].split(os.pathsep))
