"""A child process that the kernel signals when its parent dies (Linux's ``PR_SET_PDEATHSIG``), however the
parent dies: a sweep's training runs (SIGTERM: they save and stop) and the processes of a multi-process run
whose first process started them (SIGKILL: without it they can neither save nor go on)."""

import os

PR_SET_PDEATHSIG = 1


def _prctl():
    """prctl, found at import: a child that calls it between fork and exec (where a thread of the parent may
    have held a lock) then loads nothing."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


_PRCTL = _prctl()


def signal_on_parent_death(signum: int, parent: int) -> bool:
    """Have the kernel send ``signum`` to this process when the thread that started it (in process ``parent``)
    dies. False where it cannot (not Linux), or when that parent has already gone (this process was then
    handed to another, and ``signum`` would never come): the caller decides what to do."""
    if _PRCTL is None:
        return False
    _PRCTL(PR_SET_PDEATHSIG, signum)
    return os.getppid() == parent
