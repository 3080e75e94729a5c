"""Which agent hellos the daemon accepts.

gRPC's Python server exposes no peer credentials for a unix socket (see docs/reliability.md),
so the daemon cannot prove that a stream comes from the pid its hello names. What it can check
it does: the pid is a possible process id, and no live stream already holds it. The first
stream to claim a pid keeps it until that stream ends; a second claim is refused instead of
evicting the first, so a local user cannot make another job's series vanish. A pid that is not
a process on this host (a job in another pid namespace) is accepted: it only labels series,
and the host collector finds no process for it.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from xmon.proto import xmon_pb2

PID_MAX_LIMIT = 4_194_304  # the kernel's largest pid_max on 64-bit Linux


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
