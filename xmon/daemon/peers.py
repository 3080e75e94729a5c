"""Whether the process an agent's hello names made a connection to this daemon.

gRPC's Python server hands a stream neither its connection's file descriptor nor its peer's
credentials (``context.peer()`` of a unix socket is ``"unix:"``). The daemon process holds
every connection it accepted, though: ``/proc/self/fd`` lists them, and the kernel tells the
credentials of each one's client from the socket itself (``SO_PEERCRED``: the process that
connected, its pid in the daemon's own pid namespace) and, since Linux 6.5, a pidfd of that
process (``SO_PEERPIDFD``), which outlives the pid: a pid freed and given to another process
is told apart from the one that connected. Nothing of another process is read but its
``/proc/<pid>/status`` (world-readable), so a daemon running as ``xmon`` checks as root does,
and a client in another network namespace (a pod) is seen like any other, its connection
being the daemon's.

A claim is verified when a process that connected to the daemon's socket, and is still
alive, is the claimed pid, or is that pid in its own pid namespace (a container: ``NSpid``);
the job is then known by the connecting process's pid here (``PidCheck.host_pid``), so a
process in a namespace of its own that makes itself the pid of a host process gets its own
pid, never the other's. It is refuted when no connected process is that pid. It cannot be
decided where the kernel will not say: not Linux, a client whose pid namespace the daemon
cannot see (the kernel then gives pid 0), descriptors unreadable, or past the time bound.

This binds a claim to a connection of the claimed process, not to the stream's own
connection, which gRPC does not name; the stream then proves it is that process's
(xmon.daemon.proof).
"""

from __future__ import annotations

import asyncio
import enum
import os
import signal
import socket
import struct
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHECK_SECONDS = 0.5  # the whole check; past it the claim is undecided
MAX_FDS = 1 << 20  # of the daemon's own descriptors looked at, at most
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux 6.5; Python 3.11 lacks the name
_UCRED = struct.Struct("=iII")  # pid, uid, gid
_STATUS_BYTES = 4096  # of /proc/<pid>/status: Tgid and NSpid come early


class Verdict(enum.Enum):
    VERIFIED = "verified"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class PidCheck:
    verdict: Verdict
    reason: str = ""  # one line, for a refusal or the log; empty when verified outright
    host_pid: int | None = None  # verified: the connecting process's pid in the daemon's view
    pidfd: OwnedFd | None = None  # verified: that process's pidfd (Linux 6.5 and later)


class OwnedFd:
    """A descriptor closed with its last reference (or by ``close``): a check refused after
    it was verified (a pid attached meanwhile) drops its pidfd without a path of its own."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._finalizer()


@dataclass(frozen=True)
class Peer:
    """The client of one connection the daemon accepted."""

    pid: int  # in the daemon's pid namespace; 0 when the kernel cannot say (another one)
    fd: int  # the daemon's descriptor of the connection
    link: str  # what that descriptor is (``socket:[INODE]``), to tell a reused number


class Undecided(Exception):
    """The check cannot decide; the message says why."""


def connection_peers(
    listener_name: str, deadline: float, fds: Path = Path("/proc/self/fd")
) -> list[Peer]:
    """The client of every connection accepted on the unix socket bound to ``listener_name``
    (an accepted socket carries its listener's name)."""
    if sys.platform != "linux":
        raise Undecided("peer credentials are read on Linux")
    name = _normal(os.fsencode(listener_name))
    try:
        names = os.listdir(fds)
    except OSError as exc:
        raise Undecided(f"cannot list {fds}: {exc.strerror}") from None
    peers: list[Peer] = []
    for fd_name in names[:MAX_FDS]:
        if time.monotonic() > deadline:
            raise Undecided(f"too many descriptors to look through in {CHECK_SECONDS:g} s")
        peer = _accepted_peer(fds / fd_name, int(fd_name), name)
        if peer is not None:
            peers.append(peer)
    return peers


def _accepted_peer(link: Path, fd: int, name: bytes) -> Peer | None:
    """The peer of descriptor ``fd`` when it is a connection accepted on ``name``."""
    try:
        target = os.readlink(link)
        if not target.startswith("socket:["):
            return None
        sock = socket.socket(fileno=os.dup(fd))  # a copy: closing it leaves gRPC's alone
    except OSError:
        return None  # closed meanwhile
    with sock:
        try:
            bound = sock.getsockname()  # a str for a unix socket only
            if not isinstance(bound, str) or not _same_path(os.fsencode(bound), name):
                return None
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                return None  # the listening socket itself
            pid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        except OSError:
            return None
    return Peer(pid, fd, target)


def peer_pidfd(peer: Peer) -> OwnedFd | None:
    """A pidfd of the process that made ``peer``'s connection; None where the kernel gives
    none (before Linux 6.5), or the descriptor is no longer that connection."""
    try:
        sock = socket.socket(fileno=os.dup(peer.fd))
    except OSError:
        return None
    with sock:
        try:
            if os.readlink(f"/proc/self/fd/{sock.fileno()}") != peer.link:
                return None
            return OwnedFd(int(sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)))
        except OSError:
            return None


def _same_path(found: bytes, name: bytes) -> bool:
    """Whether a socket's bound name is the path ``name`` (normalized): gRPC binds
    ``unix:///abs/path`` as ``///abs/path``, and the kernel reports the name as bound."""
    found = found.rstrip(b"\0")
    return found == name or (b"//" in found and _normal(found) == name)


def _normal(path: bytes) -> bytes:
    while b"//" in path:
        path = path.replace(b"//", b"/")
    return path


def alive(pid: int, pidfd: OwnedFd | None) -> bool:
    """Whether the process that connected is still running. Its pidfd says so for that very
    process; the pid alone may by now name another one."""
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd.fd, 0)
        else:
            os.kill(pid, 0)
    except PermissionError:
        return True  # it exists; this daemon may not signal it
    except OSError:
        return False
    return True


def _status_pids(pid: int, field: bytes, proc: Path) -> list[bytes] | None:
    """The pids on the ``field`` line (``Tgid:``, ``NSpid:``) of ``/proc/<pid>/status``; None
    when the line or the process is not there."""
    try:
        with open(f"{proc}/{pid}/status", "rb") as status:
            text = status.read(_STATUS_BYTES)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field):
            return line.split()[1:]
    return None


def innermost_pid(pid: int, proc: Path = Path("/proc")) -> int | None:
    """A process's pid in its own pid namespace when that is nested below this one (its
    ``NSpid:`` line names more than one pid); else None."""
    pids = _status_pids(pid, b"NSpid:", proc)
    return int(pids[-1]) if pids is not None and len(pids) > 1 else None


def thread_group(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The process (tgid) that ``pid`` belongs to; None when there is none here."""
    tgid = _status_pids(pid, b"Tgid:", proc)
    return int(tgid[0]) if tgid else None


class PidVerifier:
    """Checks pid claims against the clients of the connections on the daemon's own socket."""

    def __init__(
        self,
        listener_name: Callable[[], str],
        proc: Path = Path("/proc"),
        fds: Path = Path("/proc/self/fd"),
    ) -> None:
        self._listener_name = listener_name  # the name the kernel reports (the bound one)
        self._proc = proc
        self._fds = fds

    def check(self, pid: int) -> PidCheck:
        deadline = time.monotonic() + CHECK_SECONDS
        try:
            peers = connection_peers(self._listener_name(), deadline, self._fds)
        except Undecided as exc:
            return PidCheck(Verdict.UNKNOWN, str(exc))
        found, pidfd = _live_connection(pid, peers)  # a host process that connected
        if found:
            return PidCheck(Verdict.VERIFIED, "", pid, pidfd)
        for host_pid in sorted({p.pid for p in peers if p.pid and p.pid != pid}):
            if innermost_pid(host_pid, self._proc) != pid:
                continue  # not a process in a nested pid namespace (a container) that is pid
            found, pidfd = _live_connection(host_pid, peers)
            if found:
                reason = f"pid {pid} in its own pid namespace: host pid {host_pid}"
                return PidCheck(Verdict.VERIFIED, reason, host_pid, pidfd)
        return self._unproven(pid, peers)

    def _unproven(self, pid: int, peers: list[Peer]) -> PidCheck:
        """Why no connected process is ``pid``: unknown while a client the daemon cannot see
        the pid of is connected, else refuted."""
        if any(p.pid == 0 for p in peers):
            return PidCheck(
                Verdict.UNKNOWN,
                f"no connected process is pid {pid}, and a client in a pid namespace this "
                "daemon cannot see is connected",
            )
        tgid = thread_group(pid, self._proc)
        if tgid is not None and tgid != pid:
            return PidCheck(Verdict.REFUTED, f"pid {pid} is a thread of process {tgid}")
        if any(p.pid == pid for p in peers):
            return PidCheck(Verdict.REFUTED, f"the process {pid} that connected has exited")
        return PidCheck(
            Verdict.REFUTED, f"process {pid} holds no connection to this daemon's socket"
        )


def _live_connection(pid: int, peers: list[Peer]) -> tuple[bool, OwnedFd | None]:
    """Whether a connection's client is ``pid`` and still runs, and then its pidfd (None
    where the kernel gives none)."""
    for peer in peers:
        if peer.pid != pid:
            continue
        pidfd = peer_pidfd(peer)
        if alive(pid, pidfd):
            return True, pidfd
        if pidfd is not None:
            pidfd.close()
    return False, None


def watch_exit(check: PidCheck, on_exit: Callable[[], None]) -> Callable[[], None]:
    """Call ``on_exit`` on the running loop when the verified process exits (its pidfd turns
    readable); returns what stops watching and closes the pidfd. A claim so ends with its
    process: a child left holding the connection cannot keep a pid the kernel gives anew."""
    owned = check.pidfd
    if owned is None:
        return lambda: None
    pidfd, loop = owned.fd, asyncio.get_running_loop()

    def exited() -> None:
        loop.remove_reader(pidfd)  # once: the pidfd stays readable
        on_exit()

    def stop() -> None:
        loop.remove_reader(pidfd)
        owned.close()

    loop.add_reader(pidfd, exited)
    return stop
