"""The daemon's hold on its socket, and signals that arrive before it is ready for them.

The socket is the daemon's only if the file at its path is the one it created: someone may
delete it (the daemon then listens again) or, after a deletion, another daemon may create its
own there; the first daemon must then never unlink the second's live socket when it stops.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger("xmon.daemon")

_hangup_pending = False


def defer_hangup() -> None:
    """Until the daemon's loop handles SIGHUP, one only marks a reload as wanted: its default
    action would kill a daemon that systemd reloads right after starting it, and systemd's
    ``Restart=on-failure`` does not restart a process killed by SIGHUP."""
    signal.signal(signal.SIGHUP, _note_hangup)


def _note_hangup(signum: int, frame: object) -> None:
    global _hangup_pending
    _hangup_pending = True


def take_hangup() -> bool:
    """Whether a SIGHUP arrived before the loop handled them (and forget it)."""
    global _hangup_pending
    pending, _hangup_pending = _hangup_pending, False
    return pending


def file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what is at ``path`` now (not following a link); None if nothing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class SocketState(enum.Enum):
    OURS = "ours"
    MISSING = "missing"  # deleted: agents cannot reach this daemon until it listens again
    REPLACED = "replaced"  # another file (another daemon's socket) at the path


class SocketGuard:
    """Remembers which file the daemon created at its socket path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._created: tuple[int, int] | None = None
        self._warned = False

    def private_path(self) -> Path:
        """Where the server binds first. gRPC unlinks the path it listened on when it stops,
        whatever socket is there by then; bound to a private name, then linked to the public
        one, its unlink can only hit the private name."""
        return self.path.with_name(f".{self.path.name}.{os.getpid()}")

    def publish(self) -> None:
        """Give the bound socket its public name (``FileExistsError`` if something is there:
        another daemon was quicker) and drop the private one."""
        private = self.private_path()
        try:
            os.link(private, self.path)
        finally:
            private.unlink(missing_ok=True)
        self._created = file_id(self.path)
        self._warned = False

    def state(self) -> SocketState:
        now = file_id(self.path)
        if now is None:
            return SocketState.MISSING
        return SocketState.OURS if now == self._created else SocketState.REPLACED

    def warn_replaced(self) -> None:
        if not self._warned:
            log.error(
                "socket %s was replaced by another process (another daemon?): agents reach it, "
                "not this daemon; it will not be removed when this daemon stops",
                self.path,
            )
            self._warned = True

    def unlink_own(self) -> None:
        """Remove the socket only if it is still the one this daemon created."""
        if self._created is None or file_id(self.path) != self._created:
            return
        try:
            self.path.unlink()
        except OSError:
            pass
