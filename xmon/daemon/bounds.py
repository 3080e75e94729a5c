"""The daemon's resource bounds against a flood or a buggy client, and what they refused.

Every bound has a default (most are configuration keys, see ``DaemonConfig``) and a counter of
what it refused or dropped, exported as ``xmon_daemon_refused_total{bound=...}``. Memory kept per
job is estimated from what the daemon holds after a report (the converted devices and programs,
the hello's identity and the parts of the last report, each with its estimate: see
xmon.daemon.received), not from the size of the message that carried it: unknown fields and
padding are never kept.
"""

from __future__ import annotations

import resource
from collections import Counter
from dataclasses import dataclass, field

from xmon.exporters.metrics_table import REFUSAL_BOUNDS

# Estimated bytes the daemon holds per converted entry (tracemalloc of the dataclasses with
# their dict slots and label strings at the 128-character limit): see tests/faults/test_floods.
DEVICE_BYTES = 600
PROGRAM_BYTES = 2700
JOB_BASE_BYTES = 16 * 1024  # the job's hello, windows of steps and compiles, ledger rates
# Descriptors the daemon keeps for itself (files, the metrics server, collectors) when it
# caps connections below RLIMIT_NOFILE.
RESERVED_DESCRIPTORS = 128
# The latest wall-clock time (seconds since the epoch, the year 2286) the daemon takes from a
# job: formatting a later one (time.localtime) raises (xmon.daemon.intake.sanitize).
WALL_TIME_MAX = 1e10
# Calls kept for the control service's one-off requests (xmon ls, doctor, capture) when the
# streams are capped below the calls gRPC takes at once: they are refused by gRPC uncounted.
RESERVED_CALLS = 64


@dataclass(frozen=True)
class Limits:
    devices_per_job: int = 256  # a process sees its host's devices: 4-8 TPU chips, <= 16 GPUs
    programs_per_job: int = 4096
    stats_per_device: int = 64
    job_bytes: int = 16 * 1024 * 1024
    state_bytes: int = 128 * 1024 * 1024


@dataclass
class StateBudget:
    """Bytes the jobs' state holds in total, against the per-job and total limits."""

    limits: Limits = field(default_factory=Limits)
    in_use: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def room(self, job_bytes: int) -> int:
        """Bytes a job holding ``job_bytes`` may still add under both limits."""
        return max(0, min(self.limits.job_bytes - job_bytes, self.limits.state_bytes - self.in_use))

    def refuse(self, bound: str, count: int = 1) -> None:
        assert bound in REFUSAL_BOUNDS, bound
        if count > 0:
            self.refused[bound] += count

    def bound_hit(self, job_bytes: int) -> str:
        """Which memory limit stops a job holding ``job_bytes`` (for the refusal's label)."""
        per_job = self.limits.job_bytes - job_bytes
        return "job_bytes" if per_job <= self.limits.state_bytes - self.in_use else "state_bytes"


def raise_descriptor_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (systemd's default soft limit is 1024,
    for select()-based programs; gRPC uses epoll). Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # a container may refuse; the connection cap then follows the lower limit
    return int(soft)


def inflight_calls(max_inflight_bytes: int, receive_limit: int) -> int:
    """Calls the daemon takes at once so that the messages gRPC holds for them while their last
    bytes are awaited (each at most ``receive_limit``) stay within ``max_inflight_bytes``.

    gRPC's Python API has no resource quota (its C core's quota is a pointer argument that
    Python cannot make), so the bound is the receive limit times the calls at once, which
    ``grpc.aio.server(maximum_concurrent_rpcs=...)`` refuses past before reading them."""
    return max(1, max_inflight_bytes // receive_limit)


def inflight_streams(calls: int) -> int:
    """Streams (agents and views, counted and refused by the daemon itself) within ``calls``,
    leaving room for the control service's one-off requests."""
    return max(1, calls - RESERVED_CALLS)


def connection_cap(configured: int, descriptors: int) -> int:
    """Connections the daemon accepts at once: the configured cap, but never so many that
    the daemon runs out of descriptors for its own files and its metrics server."""
    return max(1, min(configured, descriptors - RESERVED_DESCRIPTORS))
