"""The test session's processes start preloaded: a `python train.py ...` (or any script or ``-m`` module)
that a test, or a sweep or benchmark under test, starts hands its command to the session's preloaded process
(server.py), which forks a copy of itself to run it; this process stays as the command's stand-in.

Python imports this module at start-up, before the script, wherever this folder is on PYTHONPATH (the
test session puts it there). Without ``NMT_TEST_PRESTART`` in the environment, or for a command the server
cannot run as a fresh interpreter would (server.py says which), it does nothing and the command starts as
usual. Importing Lightning is most of a small test run's time; a fork of a process that has imported it is
a few milliseconds.

The stand-in keeps what a test reads of a process: its pid takes the signals sent to it and passes them on
to the run, it ends as the run ends (the same exit status, or the same signal), and a SIGKILL of it is a
SIGKILL of the run (the server watches its connection). The run writes to the stand-in's own standard
streams, handed over with the command."""

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
    try:
        return not any(os.isatty(fd) for fd in (0, 1, 2))
    except OSError:  # a standard stream closed: started as usual
        return False


def _hand_over(address: str) -> None:
    import json
    import signal
    import socket

    request = json.dumps(
        {
            "executable": sys.executable,
            "parent": os.getppid(),
            "orig_argv": sys.orig_argv,
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "path": sys.path,
            # a disposition that a fresh process keeps from its parent (a shell's background job ignores SIGINT)
            "ignored": [name for name in FORWARDED if signal.getsignal(getattr(signal, name)) is signal.SIG_IGN],
        }
    ).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
        socket.send_fds(connection, [len(request).to_bytes(8, "big")], [0, 1, 2])
        connection.sendall(request)
        answer = _receive(connection, 8)
    except OSError:
        connection.close()
        return
    run = int.from_bytes(answer, "big", signed=True)
    if run <= 0:  # refused: started as usual
        connection.close()
        return

    def forward(signum, frame):
        try:
            os.kill(run, signum)
        except ProcessLookupError:
            pass

    for name in FORWARDED:
        if signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:
            signal.signal(getattr(signal, name), forward)
    try:
        status = int.from_bytes(_receive(connection, 8), "big", signed=True)
    except OSError as err:  # the server died with the run: never start the command a second time
        os.write(2, f"prestart: lost the preloaded run {run} ({err})\n".encode())
        os._exit(70)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def _receive(connection, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("the preloaded process closed the connection")
        data += chunk
    return data


if os.environ.get(ADDRESS) and _runnable():
    _hand_over(os.environ[ADDRESS])
