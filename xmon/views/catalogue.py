"""The program catalogue as rows: every compiled program of the attached jobs, with its cost,
arithmetic intensity against the device's ridge point, memory footprint and compile time.

Pure functions of a snapshot (``xmon programs`` and any other view can use them). Cost numbers
are per device, for one execution: ``flops`` and ``bytes_accessed`` loop-aware (every while-loop
body counted once per trip; lower bounds where a trip count is unknown), ``flops_xla`` as XLA
reports it. ``executions`` are those counted in the execution ledger's samples or the job's
most recent trace capture (``Program.executions``, ``executions_source``), ``None`` before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xmon.analysis import derived
from xmon.analysis.peaks import PeakTable, ridge_point
from xmon.model import Job, Program, Snapshot

SORT_KEYS = ("flops", "bytes", "time", "executions")


@dataclass(frozen=True)
class ProgramRow:
    job_name: str
    pid: int
    fingerprint: str
    name: str  # HLO module name, e.g. jit_train_step
    fun_name: str | None
    device_kind: str | None
    num_devices: int
    flops: float | None  # per device, one execution, loop-aware
    flops_xla: float | None  # XLA's cost analysis as reported (each loop body once)
    flops_lower_bound: bool  # a loop of unknown trip count: flops and bytes are lower bounds
    flops_upper_bound: bool  # a conditional's branches differ: flops count the costliest one
    flops_branch_mix: bool  # ... and flops count them as often as samples saw them run instead
    loops: int  # while loops in the optimized HLO
    loops_unknown_trip_count: int
    bytes_accessed: float | None
    arithmetic_intensity: float | None  # FLOPs per byte
    ridge_point: float | None  # the device's peak FLOP/s over peak bytes/s
    bound: str | None  # "compute" | "memory" (roofline), None if either number is unknown
    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None
    generated_code_bytes: int | None
    peak_memory_bytes: int | None
    compile_seconds: float | None
    executions: int | None  # in the ledger's samples or the job's most recent trace capture
    executions_per_second: float | None  # executions / executions_window_seconds
    executions_window_seconds: float | None  # how long those samples recorded
    executions_counted_at: float | None  # wall clock when the newest of them ended
    executions_source: str | None  # "ledger" | "capture"
    device_seconds_per_execution: float | None  # mean device time of one execution
    cache_hit: bool
    compiled_at: float | None


def job_ridge_point(job: Job, peaks: PeakTable) -> float | None:
    """Peak FLOP/s over peak bytes/s: the daemon's numbers for the job (they include its peak
    overrides), else the built-in table for the job's device kind."""
    u = job.utilization
    if u.peak_flops_per_second and u.peak_bytes_per_second:
        return u.peak_flops_per_second / u.peak_bytes_per_second
    kinds = {d.info.device_kind for d in job.devices}
    return ridge_point(peaks.lookup(kinds.pop())) if len(kinds) == 1 else None


def _row(job: Job, program: Program, ridge: float | None) -> ProgramRow:
    intensity = derived.arithmetic_intensity(program.flops, program.bytes_accessed)
    kinds = {d.info.device_kind for d in job.devices}
    return ProgramRow(
        job_name=job.job_name, pid=job.pid, fingerprint=program.fingerprint, name=program.name,
        fun_name=program.fun_name, device_kind=kinds.pop() if len(kinds) == 1 else None,
        num_devices=program.num_devices, flops=program.flops, flops_xla=program.flops_xla,
        flops_lower_bound=program.flops_lower_bound,
        flops_upper_bound=program.flops_upper_bound,
        flops_branch_mix=program.flops_branch_mix, loops=program.loops,
        loops_unknown_trip_count=program.loops_unknown_trip_count,
        bytes_accessed=program.bytes_accessed, arithmetic_intensity=intensity,
        ridge_point=ridge, bound=derived.bound_by(intensity, ridge),
        argument_bytes=program.argument_bytes, output_bytes=program.output_bytes,
        temp_bytes=program.temp_bytes, generated_code_bytes=program.generated_code_bytes,
        peak_memory_bytes=program.peak_memory_bytes, compile_seconds=program.compile_seconds,
        executions=program.executions, executions_per_second=program.executions_per_second,
        executions_window_seconds=program.executions_window_seconds,
        executions_counted_at=program.executions_counted_at,
        executions_source=program.executions_source,
        device_seconds_per_execution=program.device_seconds_per_execution,
        cache_hit=program.cache_hit,
        compiled_at=program.compiled_at,
    )  # fmt: skip


def rows(jobs: Sequence[Job], peaks: PeakTable | None = None) -> list[ProgramRow]:
    peaks = peaks or PeakTable()
    out: list[ProgramRow] = []
    for job in jobs:
        ridge = job_ridge_point(job, peaks)
        out.extend(_row(job, program, ridge) for program in job.programs)
    return out


def select_jobs(snapshot: Snapshot, job_name: str | None, pid: int | None) -> list[Job]:
    """The jobs asked for; raises LookupError with a message naming what is attached."""
    jobs = [
        j
        for j in snapshot.jobs
        if (pid is None or j.pid == pid) and (job_name is None or j.job_name == job_name)
    ]
    if jobs or (job_name is None and pid is None):
        return jobs
    attached = ", ".join(f"{j.job_name} (pid {j.pid})" for j in snapshot.jobs) or "none"
    wanted = f"pid {pid}" if pid is not None else f"job named {job_name!r}"
    raise LookupError(f"no {wanted} is attached to the daemon; attached: {attached}")


_SORT: dict[str, Callable[[ProgramRow], float | None]] = {
    "flops": lambda r: r.flops,
    "bytes": lambda r: r.bytes_accessed,
    "time": lambda r: r.compile_seconds,
    # The rate, so that jobs whose traces recorded for different lengths compare fairly.
    "executions": lambda r: r.executions_per_second,
}


def sort_rows(items: Sequence[ProgramRow], key: str) -> list[ProgramRow]:
    """Largest first; unknown values last, ties by FLOPs then name."""
    value = _SORT[key]

    def order(r: ProgramRow) -> tuple[bool, float, float, str]:
        v = value(r)
        return (v is None, -(v or 0.0), -(r.flops or 0.0), r.name)

    return sorted(items, key=order)
