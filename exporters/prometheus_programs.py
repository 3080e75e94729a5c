"""Which programs of a job get their own series, and how the rest are folded into one.

A job can compile thousands of programs (every eager op is one); per-program series are capped
so a scrape stays small and Prometheus' series count stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from xmon.metrics import OTHER_PROGRAM
from xmon.model import Job, Program

if TYPE_CHECKING:
    from .prometheus_families import FamilyBuilder

Number = int | float
Fold = Callable[[Iterable[Number | None]], Number | None]


def _fold_sum(values: Iterable[Number | None]) -> Number | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _fold_max(values: Iterable[Number | None]) -> Number | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _fold_none(values: Iterable[Number | None]) -> Number | None:
    """For per-execution means: no single number stands for a mixture of programs."""
    return None


PROGRAM_VALUES: tuple[tuple[str, Callable[[Program], Number | None], Fold], ...] = (
    ("xmon_job_program_flops", lambda p: p.flops, _fold_sum),
    ("xmon_job_program_flops_xla", lambda p: p.flops_xla, _fold_sum),
    ("xmon_job_program_flops_lower_bound", lambda p: int(p.flops_lower_bound), _fold_max),
    ("xmon_job_program_loops", lambda p: p.loops, _fold_sum),
    ("xmon_job_program_loops_trip_count_unknown", lambda p: p.loops_unknown_trip_count, _fold_sum),
    ("xmon_job_program_bytes_accessed", lambda p: p.bytes_accessed, _fold_sum),
    ("xmon_job_program_bytes_accessed_xla", lambda p: p.bytes_accessed_xla, _fold_sum),
    ("xmon_job_program_transcendentals", lambda p: p.transcendentals, _fold_sum),
    ("xmon_job_program_argument_bytes", lambda p: p.argument_bytes, _fold_sum),
    ("xmon_job_program_output_bytes", lambda p: p.output_bytes, _fold_sum),
    ("xmon_job_program_temp_bytes", lambda p: p.temp_bytes, _fold_sum),
    ("xmon_job_program_generated_code_bytes", lambda p: p.generated_code_bytes, _fold_sum),
    ("xmon_job_program_peak_memory_bytes", lambda p: p.peak_memory_bytes, _fold_max),
    ("xmon_job_program_compile_seconds", lambda p: p.compile_seconds, _fold_sum),
    ("xmon_job_program_executions_per_second", lambda p: p.executions_per_second, _fold_sum),
    ("xmon_job_program_device_seconds_per_execution", lambda p: p.device_seconds_per_execution,
     _fold_none),
)  # fmt: skip
MIXED_SOURCE = "mixed"  # executions source of a fold whose programs were counted differently


def add_program_series(b: FamilyBuilder, job: Job, key: tuple[str, int], limit: int) -> None:
    """Per-program series: the ``limit`` heaviest programs, the rest folded into one."""
    kept, folded = rank_programs(job.programs, limit)
    b.add("xmon_job_programs", key, len(kept) + len(folded))
    for p in kept:
        labels = (*key, p.name, p.fingerprint)
        for name, get, _ in PROGRAM_VALUES:
            b.add(name, labels, get(p))
        if p.executions_source is not None:
            b.info("xmon_job_program_executions_source_info", (*labels, p.executions_source))
    if folded:
        labels = (*key, OTHER_PROGRAM, "")
        for name, get, fold in PROGRAM_VALUES:
            b.add(name, labels, fold(get(p) for p in folded))
        source = fold_source(folded)
        if source is not None:
            b.info("xmon_job_program_executions_source_info", (*labels, source))


def fold_source(programs: Iterable[Program]) -> str | None:
    """The folded programs' common executions source, "mixed" if they differ, None if none."""
    sources = {p.executions_source for p in programs} - {None}
    if not sources:
        return None
    return sources.pop() if len(sources) == 1 else MIXED_SOURCE


def rank_programs(programs: Sequence[Program], limit: int) -> tuple[list[Program], list[Program]]:
    """(kept, folded): the ``limit`` heaviest programs and the rest. One entry per fingerprint.

    Heaviest: most FLOP/s spent in the program, where a trace capture counted its executions;
    then FLOPs on all devices, then compile time (ties keep report order). Before any capture
    that is FLOPs order; after one, the programs the job actually runs most come first."""
    unique: dict[str, Program] = {}
    for p in programs:
        unique.setdefault(p.fingerprint, p)
    ranked = sorted(unique.values(), key=_weight, reverse=True)
    limit = max(limit, 0)
    return ranked[:limit], ranked[limit:]


def _weight(p: Program) -> tuple[float, float, float]:
    flops = (p.flops or 0.0) * p.num_devices
    rate = p.executions_per_second or 0.0
    return (rate * max(flops, 1.0), flops, p.compile_seconds or 0.0)
