"""Whether the process an agent's hello names holds a connection to this daemon.

gRPC's Python server shows neither a stream's file descriptor nor its peer's credentials, so
the daemon proves a claimed pid from the outside, the way ``ss -xp`` does: the kernel's
``sock_diag`` netlink interface lists the unix sockets the daemon accepted on its listening
socket (they carry the name the socket was bound to) and, for each, the inode of the client's
end; ``/proc/<pid>/fd`` shows which socket inodes a process holds (``socket:[INODE]``). A
claim is verified when the claimed pid is a process (not a thread) holding one of those client
ends, or a process in a nested pid namespace (a container) that is that pid there and holds
one, and refuted when it is a process of this host holding none and no such process exists.

What cannot be decided is said so, never guessed: not Linux, netlink refused (a sandbox), a
``/proc/<pid>/fd`` the daemon may not read (a daemon not running as root), a pid with no
process here nor below (a job in a namespace the daemon cannot see), or a check past its time
or size bounds.
"""

from __future__ import annotations

import enum
import errno
import os
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_NAME, UDIAG_SHOW_PEER = 0x1, 0x4
UNIX_DIAG_NAME, UNIX_DIAG_PEER = 0, 2
ALL_STATES = 0xFFFFFFFF  # listening and unconnected sockets too: every socket's inode counts

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_UNIX_DIAG_REQ = struct.Struct("=BBHIIIII")  # family, protocol, pad, states, ino, show, cookie
_UNIX_DIAG_MSG = struct.Struct("=BBBBIII")  # family, type, state, pad, ino, cookie
_RTATTR = struct.Struct("=HH")  # len, type
_HEAD = struct.Struct("=IH")  # an nlmsghdr's len and type

CHECK_SECONDS = 0.5  # the whole check; past it the claim is undecided
MAX_DUMP_BYTES = 64 << 20  # netlink answer read (about 100 bytes per established socket)
MAX_FDS = 1 << 20  # descriptors of the claimed process looked at, at most
_STATUS_BYTES = 4096  # /proc/<pid>/status: Tgid is on its fourth line


class Verdict(enum.Enum):
    VERIFIED = "verified"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class PidCheck:
    verdict: Verdict
    reason: str = ""  # one line, for a refusal or the log; empty when verified


class Undecided(Exception):
    """The check cannot decide; the message says why."""


def client_ends(listener_name: str, deadline: float) -> set[int]:
    """Inodes of the client ends of the connections accepted on the unix socket bound to
    ``listener_name`` (accepted sockets carry their listener's name); ``Undecided`` when the
    kernel cannot be asked."""
    return unix_sockets(listener_name, deadline)[0]


def unix_sockets(listener_name: str, deadline: float) -> tuple[set[int], set[int]]:
    """The client ends of the connections accepted on ``listener_name``, and the inode of
    every unix socket of this network namespace (any state)."""
    if sys.platform != "linux" or not hasattr(socket, "AF_NETLINK"):
        raise Undecided("peer checks need Linux's sock_diag")
    try:
        sock = open_sock_diag()
    except OSError as exc:
        raise Undecided(f"netlink sock_diag unavailable: {exc.strerror or exc}") from None
    with sock:
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendto(_dump_request(), (0, 0))
            return _read_dump(sock, _normal(os.fsencode(listener_name)), deadline)
        except OSError as exc:
            raise Undecided(f"netlink sock_diag failed: {exc.strerror or exc}") from None


def open_sock_diag() -> socket.socket:
    """A netlink socket to the kernel's sock_diag (a sandbox may refuse it)."""
    return socket.socket(
        socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG
    )


def _dump_request() -> bytes:
    body = _UNIX_DIAG_REQ.pack(
        socket.AF_UNIX, 0, 0, ALL_STATES, 0, UDIAG_SHOW_NAME | UDIAG_SHOW_PEER, 0, 0
    )
    header = _NLMSGHDR.pack(
        _NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0
    )
    return header + body


def _read_dump(sock: socket.socket, name: bytes, deadline: float) -> tuple[set[int], set[int]]:
    peers: set[int] = set()
    seen: set[int] = set()
    read = 0
    while True:
        if time.monotonic() > deadline:
            raise Undecided(f"sock_diag answer took over {CHECK_SECONDS:g} s")
        data = sock.recv(1 << 18)
        read += len(data)
        if not data or read > MAX_DUMP_BYTES:
            raise Undecided("sock_diag answer ended early or past its size bound")
        if _parse_chunk(data, name, peers, seen):
            return peers, seen


def _parse_chunk(data: bytes, name: bytes, peers: set[int], seen: set[int]) -> bool:
    """Add the client ends in one netlink read to ``peers`` and every socket's inode to
    ``seen``; True at the dump's end. Runs once per unix socket of the host, so it looks at
    little: the kernel puts a named socket's name first, and most sockets (clients) have
    none."""
    offset, size, body = 0, len(data), _NLMSGHDR.size + _UNIX_DIAG_MSG.size
    while offset + _NLMSGHDR.size <= size:
        length, kind = _HEAD.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            raise Undecided("malformed sock_diag answer")
        if kind == NLMSG_DONE:
            return True
        if kind == NLMSG_ERROR:
            code = -struct.unpack_from("=i", data, offset + _NLMSGHDR.size)[0]
            raise Undecided(f"sock_diag refused: {os.strerror(code) if code else 'error'}")
        first = offset + body
        if kind == SOCK_DIAG_BY_FAMILY and offset + body <= size:
            seen.add(_UNIX_DIAG_MSG.unpack_from(data, offset + _NLMSGHDR.size)[4])
        if kind == SOCK_DIAG_BY_FAMILY and first + _RTATTR.size <= offset + length:
            attr_length, attr = _RTATTR.unpack_from(data, first)
            if attr == UNIX_DIAG_NAME and _same_path(data[first + 4 : first + attr_length], name):
                peer = _peer(data, first + ((attr_length + 3) & ~3), offset + length)
                if peer:
                    peers.add(peer)
        offset += (length + 3) & ~3
    return False


def _same_path(found: bytes, name: bytes) -> bool:
    """Whether a socket's bound name is the path ``name`` (normalized): gRPC binds
    ``unix:///abs/path`` as ``///abs/path``, and the kernel reports the name as bound."""
    found = found.rstrip(b"\0")
    if found == name:
        return True
    return b"//" in found and _normal(found) == name


def _normal(path: bytes) -> bytes:
    while b"//" in path:
        path = path.replace(b"//", b"/")
    return path


def _peer(data: bytes, offset: int, end: int) -> int | None:
    """The UNIX_DIAG_PEER attribute among a socket's attributes from ``offset`` on."""
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            return None
        if kind == UNIX_DIAG_PEER and length >= _RTATTR.size + 4:
            return int(struct.unpack_from("=I", data, offset + _RTATTR.size)[0])
        offset += (length + 3) & ~3
    return None


def holds_any(pid: int, sockets: set[int], deadline: float, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` holds one of ``sockets`` (inodes); ``Undecided`` when its
    descriptors cannot be read, or not within the deadline and ``MAX_FDS``."""
    fds = proc / str(pid) / "fd"
    try:
        with os.scandir(fds) as entries:  # lazily: a process may hold a million descriptors
            for count, entry in enumerate(entries):
                if count >= MAX_FDS or time.monotonic() > deadline:
                    raise Undecided(f"{fds} holds too many descriptors to read in time")
                if _is_one_of(entry.path, sockets):
                    return True
    except FileNotFoundError:
        raise Undecided(f"no process {pid} on this host (another pid namespace?)") from None
    except PermissionError:
        raise Undecided(f"cannot read {fds}: permission denied") from None
    except OSError as exc:
        raise Undecided(f"cannot read {fds}: {exc.strerror}") from None
    return False


def _is_one_of(link: str, sockets: set[int]) -> bool:
    """Whether the descriptor link ``socket:[INODE]`` names one of ``sockets``. The link
    itself is read, never followed; a descriptor closed meanwhile is none of them."""
    try:
        target = os.readlink(link)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH):
            return False
        raise
    return target.startswith("socket:[") and int(target[8:-1]) in sockets


def _status_pids(pid: int, field: bytes, proc: Path) -> list[bytes] | None:
    """The pids on the ``field`` line (``Tgid:``, ``NSpid:``) of ``/proc/<pid>/status``; None
    when the line is not there. ``OSError`` when the file cannot be read."""
    with open(f"{proc}/{pid}/status", "rb") as status:  # a str: this runs for every process
        text = status.read(_STATUS_BYTES)
    for line in text.splitlines():
        if line.startswith(field):
            return line.split()[1:]
    return None


def thread_group(pid: int, proc: Path = Path("/proc")) -> int:
    """The process (tgid) that ``pid`` belongs to; ``Undecided`` if there is none here."""
    try:
        tgid = _status_pids(pid, b"Tgid:", proc)
    except FileNotFoundError:
        raise Undecided(f"no process {pid} on this host (another pid namespace?)") from None
    except OSError as exc:
        raise Undecided(f"cannot read {proc}/{pid}/status: {exc.strerror}") from None
    if not tgid:
        raise Undecided(f"{proc}/{pid}/status names no Tgid")
    return int(tgid[0])


class PidVerifier:
    """Checks pid claims against the connections accepted on the daemon's own socket."""

    def __init__(self, listener_name: Callable[[], str], proc: Path = Path("/proc")) -> None:
        self._listener_name = listener_name  # the name the kernel reports (the bound one)
        self._proc = proc

    def check(self, pid: int) -> PidCheck:
        deadline = time.monotonic() + CHECK_SECONDS
        try:
            ends, seen = unix_sockets(self._listener_name(), deadline)
            try:
                tgid: int | None = thread_group(pid, self._proc)
            except Undecided:
                tgid = None  # no such process on this host: maybe in a container's namespace
            undecided = ""
            if tgid == pid:
                try:
                    if holds_any(pid, ends, deadline, self._proc):
                        return PidCheck(Verdict.VERIFIED)
                except Undecided as exc:
                    undecided = str(exc)  # unless a container's process turns out to hold it
            # A job in a container (its own pid namespace: Kubernetes pods, docker) says its
            # pid as it sees it; the host knows it by another. The claim holds when a process
            # in a nested namespace, whose innermost pid is the claimed one, holds a connection.
            holder = namespaced_holder(pid, ends, deadline, self._proc)
            if holder is not None:
                return PidCheck(Verdict.VERIFIED, f"pid {pid} in a container: host pid {holder}")
        except Undecided as exc:
            return PidCheck(Verdict.UNKNOWN, str(exc))
        if undecided:
            return PidCheck(Verdict.UNKNOWN, undecided)
        if tgid is None:
            return PidCheck(
                Verdict.UNKNOWN, f"no process {pid} on this host or in a pid namespace below it"
            )
        # A connection from a client in another network namespace (a pod without host
        # networking) is created in the client's namespace: the kernel lists it there, not
        # here, so its holder cannot be found. While the daemon holds such a connection, a
        # claim it cannot confirm may be that client's: not proven false.
        if own_hidden_sockets(seen):
            return PidCheck(
                Verdict.UNKNOWN,
                f"pid {pid} holds no connection seen here, and a client in another network "
                "namespace (a container) is connected",
            )
        if tgid != pid:
            return PidCheck(Verdict.REFUTED, f"pid {pid} is a thread of process {tgid}")
        return PidCheck(
            Verdict.REFUTED, f"process {pid} holds no connection to this daemon's socket"
        )


def own_hidden_sockets(seen: set[int], fds: Path = Path("/proc/self/fd")) -> int:
    """How many unix sockets this process holds that its network namespace does not list
    (``seen``): connections accepted from clients in other network namespaces."""
    hidden = 0
    try:
        names = os.listdir(fds)
    except OSError:
        return 0
    for name in names[:MAX_FDS]:
        try:
            target = os.readlink(f"{fds}/{name}")
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("socket:[") or int(target[8:-1]) in seen:
            continue
        try:
            with socket.socket(fileno=os.dup(int(name))) as sock:
                hidden += sock.family == socket.AF_UNIX
        except OSError:
            continue
    return hidden


def namespaced_holder(
    pid: int, sockets: set[int], deadline: float, proc: Path = Path("/proc")
) -> int | None:
    """The host pid of a process in a nested pid namespace whose innermost pid is ``pid``
    and that holds one of ``sockets``; None when there is none. ``Undecided`` past the
    deadline."""
    try:
        entries = os.scandir(proc)
    except OSError as exc:
        raise Undecided(f"cannot list {proc}: {exc.strerror}") from None
    with entries:
        for entry in entries:
            if time.monotonic() > deadline:
                raise Undecided("too many processes to look through in time")
            if not entry.name.isdigit() or int(entry.name) == pid:
                continue
            host_pid = int(entry.name)
            if _innermost_pid(host_pid, proc) != pid:
                continue
            try:
                if holds_any(host_pid, sockets, deadline, proc):
                    return host_pid
            except Undecided:
                continue  # gone meanwhile, or not readable: not this one
    return None


def _innermost_pid(pid: int, proc: Path) -> int | None:
    """A process's pid in its own namespace, when that is nested below this one (its status
    line ``NSpid:`` names more than one pid); else None."""
    try:
        pids = _status_pids(pid, b"NSpid:", proc)
    except OSError:
        return None
    return int(pids[-1]) if pids is not None and len(pids) > 1 else None
