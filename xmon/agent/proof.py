"""The agent's side of a pid proof (xmon.daemon.proof): its stream thread shows the daemon's
token as its own thread name, which only this process can set, until the welcome."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

THREAD_NAME = Path("/proc/thread-self/comm")  # the calling thread's name (Linux 3.17)


def can_prove() -> bool:
    """Whether this process can name its threads (Linux): else it offers no proof."""
    return THREAD_NAME.exists()


def show_token(token: str) -> Callable[[], None] | None:
    """Name the calling thread ``token``; returns what gives it its name back, or None when
    the name cannot be set."""
    try:
        old = THREAD_NAME.read_bytes()
        THREAD_NAME.write_bytes(token.encode()[:15])
    except OSError:
        return None

    def restore() -> None:
        try:
            THREAD_NAME.write_bytes(old.rstrip(b"\n")[:15])
        except OSError:
            pass

    return restore
