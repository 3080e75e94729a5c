"""A unix socket that tells each connection's peer credentials, and a process that holds a
connection to it (the peers tests, in-process and with real processes;
benchmarks/pid_checks.py)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from xmon.daemon.peers import PidVerifier

# Connects CONNECTIONS times to the socket at argv[1], says so, and holds them until stdin ends.
HOLDER = """
import socket, sys
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""


class Listener:
    """A unix socket bound to a private name and linked to its public one, as the daemon's
    (xmon.daemon.lifecycle.SocketGuard), accepting (and keeping) every connection."""

    def __init__(self, directory: Path) -> None:
        self.private = directory / f".xmon.sock.{os.getpid()}"
        self.public = directory / "xmon.sock"
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(self.private))
        self.sock.listen(1024)
        os.link(self.private, self.public)
        self.private.unlink()
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def verifier(self) -> PidVerifier:
        return PidVerifier(lambda: str(self.private))

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.accepted:
            conn.close()
