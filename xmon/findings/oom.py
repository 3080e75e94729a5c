"""Out of memory: the job raised XLA's RESOURCE_EXHAUSTED; what it held, and what ran.

The agent reports the exception as it passes (xmon.agent.oom); the daemon keeps the report's
files in the job's run directory (xmon.daemon.oom) and this detector turns the latest report
into an ``oom`` finding for ``FINDING_SECONDS``: a job that caught the error and went on with a
smaller batch stops being flagged once it has run that long without another.
"""

from __future__ import annotations

from dataclasses import dataclass

from xmon.analysis.units import iec_bytes
from xmon.model import Finding

FINDING_SECONDS = 600.0
EVIDENCE_ARRAYS = 3


@dataclass(frozen=True)
class LiveArrayRow:
    shape: tuple[int, ...]
    dtype: str
    sharding: str
    nbytes: int
    device_bytes: tuple[tuple[int, int], ...] = ()  # (device id, bytes), by device id

    def describe(self) -> str:
        shape = ",".join(str(d) for d in self.shape)
        devices = ", ".join(f"device {d}: {iec_bytes(b)}" for d, b in self.device_bytes[:8])
        more = f" (+{len(self.device_bytes) - 8} devices)" if len(self.device_bytes) > 8 else ""
        where = f"; {devices}{more}" if devices else ""
        return f"{self.dtype}[{shape}] {iec_bytes(self.nbytes)}{where}; {self.sharding}"


@dataclass(frozen=True)
class ProgramMemory:
    """The running program's memory analysis (XLA's, per device), as the agent recorded it."""

    name: str
    source: str  # how it was told apart (xmon.agent.oom.pick_program)
    argument_bytes: int | None = None
    output_bytes: int | None = None
    temp_bytes: int | None = None
    alias_bytes: int | None = None

    @property
    def needed_bytes(self) -> int | None:
        parts = (self.argument_bytes, self.output_bytes, self.temp_bytes)
        if any(p is None for p in parts):
            return None
        return sum(p or 0 for p in parts) - (self.alias_bytes or 0)

    def describe(self) -> str:
        def size(value: int | None) -> str:
            return iec_bytes(value) if value is not None else "unknown"

        return (
            f"arguments {size(self.argument_bytes)} + output {size(self.output_bytes)} + "
            f"temporaries {size(self.temp_bytes)} - aliased {size(self.alias_bytes)} = "
            f"{size(self.needed_bytes)} per device"
        )


@dataclass(frozen=True)
class OomEvent:
    """One out-of-memory report as the daemon kept it."""

    wall_time: float
    monotonic: float  # the daemon's clock when it arrived
    error: str
    seen_by: str
    arrays: tuple[LiveArrayRow, ...]
    live_arrays_total: int
    live_bytes_total: int
    program: ProgramMemory | None
    failed_allocation_bytes: int | None
    device_limit_bytes: int | None  # the allocators' limit, summed over devices; None on CPU
    paths: tuple[str, ...]  # the files written (report JSON, memory profile)
    profile_note: str = ""  # why there is no memory profile


def detect_oom(
    event: OomEvent | None, now: float, since: float, limit_bytes: int | None, limit_source: str
) -> Finding | None:
    """``now`` on the clock of ``event.monotonic``; ``limit_bytes`` the job's memory limit."""
    if event is None or now - event.monotonic > FINDING_SECONDS:
        return None
    program = event.program
    largest = event.arrays[0] if event.arrays else None
    wanted = (
        f"{iec_bytes(event.failed_allocation_bytes)} could not be allocated"
        if event.failed_allocation_bytes is not None
        else "an allocation failed"
    )
    where = f" in {program.name}" if program is not None else ""
    held = f"; largest live array {largest.describe().split(';')[0]}" if largest else ""
    evidence: list[tuple[str, str]] = [
        ("error", event.error),
        ("seen", event.seen_by),
        ("live arrays", f"{event.live_arrays_total} holding {iec_bytes(event.live_bytes_total)}"),
    ]
    evidence += [
        (f"largest live array {i + 1}", row.describe())
        for i, row in enumerate(event.arrays[:EVIDENCE_ARRAYS])
    ]
    if program is not None:
        evidence.append(("program", f"{program.name} ({program.source})"))
        evidence.append(("program memory", program.describe()))
    limit = event.device_limit_bytes or limit_bytes
    source = "device memory limit" if event.device_limit_bytes else limit_source
    evidence.append((source, iec_bytes(limit) if limit is not None else "unknown"))
    evidence += [("file", path) for path in event.paths]
    if event.profile_note:
        evidence.append(("memory profile", event.profile_note))
    return Finding(
        kind="oom",
        severity="error",
        summary=f"out of memory{where}: {wanted}{held}",
        since=since,
        evidence=tuple(evidence),
        fix="Hold less at once: donate the arguments a step replaces "
        "(jax.jit(step, donate_argnums=...)) so outputs reuse their buffers; recompute "
        "activations instead of keeping them (jax.checkpoint / remat policies); use a smaller "
        "batch or accumulate gradients over micro-batches; shard the largest arrays over more "
        "devices (the per-device bytes above show what each device holds). On GPU, XLA "
        "preallocates XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75) of memory: raise it if "
        "nothing else shares the device. Open the .prof with pprof to see who allocated what.",
        subject=program.name if program is not None else None,
        value=float(event.failed_allocation_bytes)
        if event.failed_allocation_bytes is not None
        else None,
    )
