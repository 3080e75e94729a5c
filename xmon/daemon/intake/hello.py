"""Which agent hellos the daemon accepts.

The pid a hello names must be a possible process id, and no live stream may already hold it:
the first stream to claim a pid keeps it until that stream ends; a second claim is refused
instead of evicting the first, so a local user cannot make another job's series vanish.

gRPC's Python server gives a stream no peer credentials (see docs/reliability.md), so the
claim is checked against those of the connections the daemon accepted (xmon.daemon.peers):
the claimed pid must be a process that connected to the daemon's socket (or that process's
pid in its own pid namespace), and the stream must show that it is that process's
(xmon.daemon.proof). ``verify_pids`` decides what follows: "prefer" (the default)
refuses a claim proven false and accepts one that cannot be checked (not Linux, a client in a
pid namespace the daemon cannot see), marked unverified; "require" accepts only verified
claims; "off" checks nothing.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from xmon.daemon.peers import PidCheck, PidVerifier, Verdict
from xmon.wire.proto import xmon_pb2

PID_MAX_LIMIT = 4_194_304  # the kernel's largest pid_max on 64-bit Linux
PID_POLICIES = ("require", "prefer", "off")  # the daemon's verify_pids


def hello_refusal(
    hello: xmon_pb2.AgentHello, attached_pids: Iterable[int]
) -> tuple[grpc.StatusCode, str] | None:
    """Why this hello is refused (a status and a one-line reason), or None to accept it."""
    pid = hello.pid
    if not 0 < pid <= PID_MAX_LIMIT:
        return grpc.StatusCode.INVALID_ARGUMENT, f"pid {pid} is not a process id"
    if pid in set(attached_pids):
        return (
            grpc.StatusCode.ALREADY_EXISTS,
            f"pid {pid} is already attached by a live agent stream; it keeps it until it ends",
        )
    return None


@dataclass
class PidClaims:
    """The daemon's check of the pid each hello claims (``verify_pids``)."""

    policy: str = "prefer"
    verifier: PidVerifier | None = None  # None: nothing to check with (a daemon in a test)

    async def check(self, pid: int) -> PidCheck:
        """The claim's verdict; the check (a millisecond or two, 0.5 s at most) runs in a
        thread so that a flood of hellos never stalls the daemon's loop."""
        if self.policy == "off" or self.verifier is None:
            return PidCheck(Verdict.UNKNOWN, 'pid claims are not checked (verify_pids = "off")')
        return await asyncio.to_thread(self.verifier.check, pid)

    def refusal(self, pid: int, check: PidCheck) -> tuple[grpc.StatusCode, str] | None:
        """Why the claim is refused (a status and a one-line reason), or None to accept it."""
        if check.verdict is Verdict.VERIFIED or self.policy == "off":
            return None
        if check.verdict is Verdict.REFUTED:
            reason = f"pid {pid} is not this stream's process: {check.reason}"
            return grpc.StatusCode.PERMISSION_DENIED, reason
        if self.policy == "require":
            reason = f'cannot verify pid {pid} ({check.reason}) and verify_pids is "require"'
            return grpc.StatusCode.PERMISSION_DENIED, reason
        return None


@dataclass
class Arrivals:
    """Streams waiting for their hello, oldest first (``max_pending_hellos``).

    An agent sends its hello as soon as its stream opens, so a stream still waiting when the
    room is full is the one to close: closing the oldest keeps a flood of streams that never
    finish a hello from holding the room (and what gRPC holds for their unfinished messages)
    while a real agent arriving meanwhile gets in."""

    limit: int = 256
    # ticket -> (set when the stream is to close, the task reading its hello)
    _waiting: OrderedDict[int, tuple[asyncio.Event, asyncio.Task[Any] | None]] = field(
        default_factory=OrderedDict
    )
    _next: int = 0

    def enter(self) -> tuple[int, asyncio.Event, int]:
        """A ticket for a new stream, its event set when it is to close, and how many older
        streams were closed to make room for it."""
        closed = 0
        while len(self._waiting) >= self.limit:
            _, (event, task) = self._waiting.popitem(last=False)
            event.set()
            if task is not None:  # its read is cancelled; it then ends the stream
                task.cancel()
            closed += 1
        self._next += 1
        event = asyncio.Event()
        self._waiting[self._next] = (event, asyncio.current_task())
        return self._next, event, closed

    def leave(self, ticket: int) -> None:
        self._waiting.pop(ticket, None)

    def __len__(self) -> int:
        return len(self._waiting)
