"""Child processes that die with their parent, whatever ends it.

``xmon demo`` runs a daemon and a JAX job as children. Ctrl-C alone is not enough to stop them:
``kill PID``, ``timeout``, a closed terminal (SIGHUP) or a SIGKILL of the parent would leave the
job running and printing. Three layers cover every case:

* each child runs in a process group of its own, so a terminal's Ctrl-C reaches only the parent,
  which then stops the children in order (job first, then the daemon it reports to);
* SIGTERM, SIGHUP and SIGINT in the parent raise ``Stopped``, so its ``finally`` runs and stops
  them;
* on Linux each child asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``),
  which is the only thing that still works after a SIGKILL of the parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Stopped(Exception):
    """The parent was asked to stop by a signal; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _die_with(parent_pid: int) -> Callable[[], None]:
    """What a child runs between fork and exec: SIGTERM when the parent goes."""

    def preexec() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        # The parent may have died before prctl ran: then nobody would signal this child.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``command`` in a process group of its own, bound to this process's life."""
    # The preexec function only calls prctl and getppid: safe between fork and exec.
    preexec = _die_with(os.getpid())
    return subprocess.Popen(command, env=env, process_group=0, preexec_fn=preexec)


def stop(process: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    """SIGTERM to the child's whole group, SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait(timeout)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        process.send_signal(sig)


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    # Once stopping, further signals must not interrupt the cleanup that stops the children.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP (and SIGINT, unless the shell started us ignoring it) into
    ``Stopped`` inside the block; the previous handlers come back after it."""
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        if not (sig == signal.SIGINT and previous[sig] == signal.SIG_IGN):
            signal.signal(sig, _raise_stopped)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
