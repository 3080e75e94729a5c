"""Memory leak / time to OOM: bytes in use at step boundaries rising along a fitted line.

The daemon keeps one reading per snapshot in which the job's step count moved (the agent reads
CPU live arrays at rest between steps; allocator stats elsewhere), placed at the time it was
read: a CPU reading is paced and can be many steps older than the report carrying it, and the
same reading seen again later is not a new point (it would flatten the fitted growth). A
least-squares line through the last readings gives the growth per second; with the devices'
limit (host RAM on CPU, where PJRT has no limit) it gives the time until the job runs out.

Where the device readings have stopped (none new for ``STALE_READING_SECONDS`` while the job
steps), the process's resident memory at the same step boundaries (the host collector's, read
every tick) is the evidence: on CPU the walk of live arrays is paced, so a job whose live
arrays grow is read ever more rarely (a job keeping a copy of its params every step grew 3.3
to 11.4 GB in two minutes while its last reading stayed at 1 GB). Resident memory also grows
while a healthy job warms up (a transformer's grew 6 MiB/s for its first minute: allocator
arenas, compiled code), so it is consulted only then, and must grow by more
(``RESIDENT_MIN_GROWTH_BYTES`` and ``RESIDENT_MIN_GROWTH_RATIO``).
"""

from __future__ import annotations

from collections.abc import Sequence

from xmon.model import Finding, HostSample, Job

MIN_READINGS = 8
MIN_SPAN_SECONDS = 20.0
MIN_FIT = 0.8  # r squared: the growth is a trend, not noise
MIN_GROWTH_RATIO = 0.05  # over the window, against the first reading
MIN_GROWTH_BYTES = 8 << 20
ERROR_SECONDS_TO_OOM = 3600.0
STALE_READING_SECONDS = 20.0  # no device reading this much newer: resident memory is the evidence
RESIDENT_MIN_GROWTH_BYTES = 64 << 20
RESIDENT_MIN_GROWTH_RATIO = 0.1


def in_use_bytes(job: Job) -> int | None:
    values = [d.memory.in_use_bytes for d in job.devices]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def read_at(job: Job) -> float | None:
    """Wall clock of the job's memory reading where it is older than the report (CPU)."""
    known = [d.memory.read_at for d in job.devices if d.memory.read_at is not None]
    return max(known) if known else None


DEVICE, RESIDENT = "device", "resident"  # the kinds of reading a leak is fitted to


def limit_bytes(job: Job, host: HostSample | None) -> tuple[int | None, str]:
    """The devices' PJRT limit, else (CPU) the host RAM still available plus what it holds."""
    limits = [d.memory.bytes_limit for d in job.devices]
    if limits and all(limit for limit in limits):
        return sum(limit for limit in limits if limit), "device memory limit"
    if job.platform == "cpu" and host is not None:
        held = in_use_bytes(job) or 0
        return host.memory_available_bytes + held, "host memory available"
    return None, "unknown"


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares (slope, r squared) of y over x; None when x does not vary."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    syy = sum((y - my) ** 2 for _, y in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    if sxx <= 0:
        return None
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, r2


def _resident_limit(last: float, host: HostSample | None) -> tuple[int | None, str]:
    """What the process may still grow to: the host memory available plus what it holds."""
    if host is None:
        return None, "unknown"
    return host.memory_available_bytes + int(last), "host memory available"


def detect_leak(
    readings: Sequence[tuple[float, float]],
    job: Job,
    host: HostSample | None,
    since: float,
    kind: str = DEVICE,
) -> Finding | None:
    """``readings``: (monotonic seconds, bytes) at step boundaries, oldest first: the devices'
    bytes in use (``DEVICE``) or the process's resident memory (``RESIDENT``)."""
    if len(readings) < MIN_READINGS or readings[-1][0] - readings[0][0] < MIN_SPAN_SECONDS:
        return None
    line = fit(readings)
    if line is None:
        return None
    slope, r2 = line
    first, last = readings[0][1], readings[-1][1]
    growth = last - first
    resident = kind == RESIDENT
    least = (
        max(RESIDENT_MIN_GROWTH_BYTES, RESIDENT_MIN_GROWTH_RATIO * first)
        if resident
        else max(MIN_GROWTH_BYTES, MIN_GROWTH_RATIO * first)
    )
    if slope <= 0 or r2 < MIN_FIT or growth < least:
        return None
    limit, limit_source = _resident_limit(last, host) if resident else limit_bytes(job, host)
    to_oom = (limit - last) / slope if limit is not None and limit > last else None
    span = readings[-1][0] - readings[0][0]
    error = to_oom is not None and to_oom < ERROR_SECONDS_TO_OOM
    when = f", out of memory in about {_duration(to_oom)}" if to_oom is not None else ""
    what = "the process's resident memory grows" if resident else "bytes in use grow"
    return Finding(
        kind="memory_leak",
        severity="error" if error else "warning",
        summary=f"{what} {_bytes(slope)}/s at step boundaries{when}",
        since=since,
        evidence=(
            ("growth per second", _bytes(slope)),
            ("fit r squared", f"{r2:.2f}"),
            ("window", f"{len(readings)} readings over {span:.0f} s"),
            (
                "first / latest resident memory" if resident else "first / latest bytes in use",
                f"{_bytes(first)} / {_bytes(last)}",
            ),
            (limit_source, _bytes(limit) if limit is not None else "unknown"),
            ("seconds to out of memory", f"{to_oom:.0f}" if to_oom is not None else "unknown"),
        ),
        fix="Something keeps arrays alive from step to step: a list of losses or metrics "
        "holding device arrays (append float(loss) or jax.device_get it), a cache keyed on "
        "arrays, or jit outputs kept in a history. `xmon capture --memory` saves a device "
        "memory profile; compare two of them with pprof -diff_base.",
        value=to_oom,
    )


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
