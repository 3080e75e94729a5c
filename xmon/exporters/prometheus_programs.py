"""Which programs of a job get their own series, and how the rest are folded into one.

A job can compile thousands of programs (every eager op is one); per-program series are capped
so a scrape stays small and Prometheus' series count stays bounded.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from xmon.exporters.metrics_table import OTHER_PROGRAM
from xmon.model import Job, Program

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder

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
    ("xmon_job_program_flops_upper_bound", lambda p: int(p.flops_upper_bound), _fold_max),
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


# One entry a value, or (name, labels, None, True) for an info series.
Series = list[tuple[str, tuple[object, ...], Number | None, bool]]


class ProgramSeriesCache:
    """Each job's program series, kept while the job's programs are the very same objects.

    Programs are frozen and the daemon keeps the same objects while nothing about them
    changed, so thousands of programs are ranked and folded once, not on every render (8 jobs
    x 4,096 programs: ~50 ms of a core a render). Renders run on scrape threads: entries are
    replaced whole, never changed in place."""

    def __init__(self) -> None:
        # (job key, limit) -> (the program objects, their series)
        self._series: dict[tuple[tuple[str, int], int], tuple[tuple[Program, ...], Series]] = {}

    def series(self, job: Job, key: tuple[str, int], limit: int) -> Series:
        cached = self._series.get((key, limit))
        if cached is not None and _same(cached[0], job.programs):
            return cached[1]
        series = program_series(job.programs, key, limit)
        self._series[(key, limit)] = (job.programs, series)
        return series

    def keep(self, jobs: Iterable[Job]) -> None:
        """Drop what was kept for jobs no longer in the snapshot (called once a period)."""
        live = {(job.job_name, job.pid) for job in jobs}
        for entry in [e for e in list(self._series) if e[0] not in live]:
            self._series.pop(entry, None)


def add_program_series(
    b: FamilyBuilder,
    job: Job,
    key: tuple[str, int],
    limit: int,
    cache: ProgramSeriesCache | None = None,
) -> None:
    """Per-program series: the ``limit`` heaviest programs, the rest folded into one."""
    series = cache.series(job, key, limit) if cache else program_series(job.programs, key, limit)
    for name, labels, value, info in series:
        if info:
            b.info(name, labels)
        else:
            b.add(name, labels, value)


def _same(a: tuple[Program, ...], b: tuple[Program, ...]) -> bool:
    return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))


def program_series(programs: Sequence[Program], key: tuple[str, int], limit: int) -> Series:
    """The series of ``add_program_series``, as a list."""
    kept, folded = rank_programs(programs, limit)
    out: Series = [("xmon_job_programs", key, len(kept) + len(folded), False)]
    for p in kept:
        labels = (*key, p.name, p.fingerprint)
        out += [(name, labels, get(p), False) for name, get, _ in PROGRAM_VALUES]
        if p.executions_source is not None:
            source_labels = (*labels, p.executions_source)
            out.append(("xmon_job_program_executions_source_info", source_labels, None, True))
    if folded:
        labels = (*key, OTHER_PROGRAM, "")
        out += [(name, labels, fold(get(p) for p in folded), False)
                for name, get, fold in PROGRAM_VALUES]  # fmt: skip
        source = fold_source(folded)
        if source is not None:
            out.append(("xmon_job_program_executions_source_info", (*labels, source), None, True))
    return out


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
