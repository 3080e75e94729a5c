"""Sortable tables of ``xmon top``: jobs, programs (the catalogue), compile events.

A table is rebuilt from each snapshot; the highlighted row follows its item (by key), not its
position, so a re-sort or a new job does not move the selection to another job. A table may show
only its first rows in the sort order (``max_rows``): the programs of 8 jobs of 4,096 each took
over a second to rebuild (a DataTable row of Text cells each), so the view never redrew; sorting
all of them still takes milliseconds, and the label says how many are shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from xmon.analysis import derived
from xmon.model import CompileEvent, Job, Program
from xmon.top import fmt
from xmon.top.findings import job_mark, mark_rank
from xmon.top.goodput import goodput_ratio, lost_share, lost_to
from xmon.top.viewmodel import (
    job_busy_ratio,
    job_memory_in_use,
    job_memory_limit,
    mfu_declared,
    sort_by,
)


@dataclass(frozen=True)
class Column:
    label: str
    cell: Callable[[Any], str]
    sort: Callable[[Any], Any] | None = None  # None: not a sort key
    numeric: bool = True  # right-aligned


class SortableTable(DataTable[Any]):
    """A DataTable over items of one kind, with a sort column cycled by the app's keys."""

    def __init__(
        self,
        columns: Sequence[Column],
        key_of: Callable[[Any], str],
        sort_label: str,
        reverse: bool = True,
        max_rows: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.columns_spec = list(columns)
        self.key_of = key_of
        self.sort_label = sort_label
        self.reverse = reverse
        self.max_rows = max_rows  # None: every item
        self.keys: list[str] = []

    @property
    def sort_labels(self) -> list[str]:
        return [c.label for c in self.columns_spec if c.sort is not None]

    def cycle_sort(self) -> str:
        labels = self.sort_labels
        self.sort_label = labels[(labels.index(self.sort_label) + 1) % len(labels)]
        return self.sort_label

    def toggle_reverse(self) -> None:
        self.reverse = not self.reverse

    @property
    def selected_key(self) -> str | None:
        row = self.cursor_row
        return self.keys[row] if 0 <= row < len(self.keys) else None

    def show(self, items: Sequence[Any]) -> None:
        spec = next(c for c in self.columns_spec if c.label == self.sort_label)
        assert spec.sort is not None
        ordered = sort_by(items, spec.sort, self.reverse)[: self.max_rows]
        selected = self.selected_key
        self.clear(columns=True)
        for column in self.columns_spec:
            label = column.label + (" ▼" if self.reverse else " ▲") * (column is spec)
            self.add_column(Text(label, justify="right" if column.numeric else "left"))
        self.keys = [self.key_of(item) for item in ordered]
        for item, key in zip(ordered, self.keys, strict=True):
            self.add_row(*(_cell(c, item) for c in self.columns_spec), key=key)
        if selected in self.keys:
            self.move_cursor(row=self.keys.index(selected), animate=False)


def _cell(column: Column, item: Any) -> Text:
    return Text(column.cell(item), justify="right" if column.numeric else "left")


# --- jobs ------------------------------------------------------------------------------------


def _memory(job: Job) -> str:
    used, limit = job_memory_in_use(job), job_memory_limit(job)
    return fmt.human_bytes(used) + (f"/{fmt.human_bytes(limit)}" if limit is not None else "")


def _job_cpu(job: Job) -> float | None:
    return job.process.cpu_utilization_ratio if job.process else None


def _step_count(job: Job) -> str:
    """Marked steps counted; inferred ones have a rate and no count."""
    counted = job.steps.counted_total
    return "-" if counted is None else str(counted)


def _steps(text: str, job: Job) -> str:
    """Step numbers of a job without step markers carry the inferred mark."""
    return fmt.marked(text, fmt.INFERRED_MARK, job.steps.inferred)


def _job_name(job: Job) -> str:
    """A process of a multi-process job says which: ``train [2/4]``."""
    fleet = job.fleet
    if fleet is None or fleet.process_count <= 1:
        return job.job_name
    return f"{job.job_name} [{fleet.process_index}/{fleet.process_count}]"


def _mfu(job: Job) -> str:
    if not mfu_declared(job):
        return fmt.UNDECLARED_TEXT
    return fmt.percent(job.utilization.model_flops_utilization_ratio, 1)


def _hfu(job: Job) -> str:
    u = job.utilization
    text = fmt.percent(u.hardware_flops_utilization_ratio, 1)
    return fmt.bounded(text, u.flops_lower_bound, u.flops_upper_bound)


JOB_COLUMNS = (
    Column("PID", lambda j: str(j.pid), lambda j: j.pid),
    Column("JOB", lambda j: _job_name(j), lambda j: j.job_name.lower(), numeric=False),
    Column("!", job_mark, mark_rank, numeric=False),  # its worst finding (f: the findings view)
    Column("DEV", lambda j: str(len(j.devices))),
    Column("MEMORY", _memory, job_memory_in_use),
    Column("STEP", lambda j: _steps(fmt.seconds(j.steps.p50_step_seconds), j),
           lambda j: j.steps.p50_step_seconds),
    Column("STEPS/S", lambda j: _steps(fmt.rate(j.steps.steps_per_second), j),
           lambda j: j.steps.steps_per_second),
    Column("MFU", _mfu, lambda j: j.utilization.model_flops_utilization_ratio),
    Column("HFU", _hfu, lambda j: j.utilization.hardware_flops_utilization_ratio),
    Column("BUSY", lambda j: fmt.percent(job_busy_ratio(j)), job_busy_ratio),
    Column("CPU", lambda j: fmt.percent(_job_cpu(j)), _job_cpu),
    Column("GOOD", lambda j: fmt.percent(goodput_ratio(j)), goodput_ratio),  # of the wall time
    Column("LOST TO", lost_to, lost_share, numeric=False),  # the biggest badput
    Column("STEPS", lambda j: _steps(_step_count(j), j), lambda j: j.steps.steps_total),
)  # fmt: skip


def jobs_table(**kwargs: Any) -> SortableTable:
    return SortableTable(JOB_COLUMNS, lambda j: str(j.pid), "MEMORY", **kwargs)


# --- programs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramItem:
    job: Job
    program: Program


def _intensity(item: ProgramItem) -> float | None:
    return derived.arithmetic_intensity(item.program.flops, item.program.bytes_accessed)


def _p(get: Callable[[Program], Any]) -> Callable[[ProgramItem], Any]:
    return lambda item: get(item.program)


PROGRAM_COLUMNS = (
    Column("JOB", lambda i: i.job.job_name, lambda i: i.job.job_name.lower(), numeric=False),
    Column("PROGRAM", lambda i: i.program.name, lambda i: i.program.name.lower(), numeric=False),
    Column("DEV", lambda i: str(i.program.num_devices)),
    Column("FLOPS", lambda i: fmt.bounded(fmt.si(i.program.flops), i.program.flops_lower_bound,
                                          i.program.flops_upper_bound), _p(lambda p: p.flops)),
    Column("BYTES", lambda i: fmt.human_bytes(i.program.bytes_accessed),
           _p(lambda p: p.bytes_accessed)),
    Column("FLOP/B", lambda i: fmt.rate(_intensity(i)), _intensity),
    Column("ARGS", lambda i: fmt.human_bytes(i.program.argument_bytes)),
    Column("OUT", lambda i: fmt.human_bytes(i.program.output_bytes)),
    Column("TEMP", lambda i: fmt.human_bytes(i.program.temp_bytes), _p(lambda p: p.temp_bytes)),
    Column("CODE", lambda i: fmt.human_bytes(i.program.generated_code_bytes)),
    Column("PEAK", lambda i: fmt.human_bytes(i.program.peak_memory_bytes),
           _p(lambda p: p.peak_memory_bytes)),
    Column("COMPILE", lambda i: fmt.seconds(i.program.compile_seconds),
           _p(lambda p: p.compile_seconds)),
    # executions per second: execution ledger or latest trace capture (n/a until either ran)
    Column("EXEC/S", lambda i: fmt.rate(i.program.executions_per_second),
           _p(lambda p: p.executions_per_second)),
    Column("CACHE", lambda i: "hit" if i.program.cache_hit else "", numeric=False),
    # AGE sorts by age (newer is younger), so "AGE descending" lists the oldest first.
    Column("AGE", lambda i: _age(i.program.compiled_at), _p(lambda p: _minus(p.compiled_at))),
)  # fmt: skip


def _age(wall_time: float | None, now: Callable[[], float] = time.time) -> str:
    return fmt.NA_TEXT if wall_time is None else fmt.seconds(max(0.0, now() - wall_time))


# Rows of the programs view: the first in its sort order (by FLOPs: the costliest programs).
# Against 32,768 programs, 500 rows cost xmon top about a quarter of a core (1,000: a third);
# a user scrolls, re-sorts or picks a job tab to see others.
MAX_PROGRAM_ROWS = 500


def programs_table(**kwargs: Any) -> SortableTable:
    kwargs.setdefault("max_rows", MAX_PROGRAM_ROWS)
    return SortableTable(
        PROGRAM_COLUMNS, lambda i: f"{i.job.pid}:{i.program.fingerprint}", "FLOPS", **kwargs
    )


def program_items(jobs: Sequence[Job]) -> list[ProgramItem]:
    return [ProgramItem(job, program) for job in jobs for program in job.programs]


# --- compiles --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileItem:
    job: Job
    event: CompileEvent
    index: int  # position in the job's recent list: keeps keys unique


COMPILE_COLUMNS = (
    Column("AGE", lambda i: _age(i.event.wall_time), lambda i: -i.event.wall_time),
    Column("JOB", lambda i: i.job.job_name, lambda i: i.job.job_name.lower(), numeric=False),
    Column("FUNCTION", lambda i: i.event.fun_name, lambda i: i.event.fun_name, numeric=False),
    Column("DURATION", lambda i: fmt.seconds(i.event.duration_seconds),
           lambda i: i.event.duration_seconds),
    Column("CACHE", lambda i: "hit" if i.event.cache_hit else "", numeric=False),
)  # fmt: skip


def compiles_table(**kwargs: Any) -> SortableTable:
    """Youngest first by default: "sorted by AGE ascending"."""
    kwargs.setdefault("reverse", False)
    return SortableTable(
        COMPILE_COLUMNS, lambda i: f"{i.job.pid}:{i.index}:{i.event.wall_time}", "AGE", **kwargs
    )


def _minus(value: float | None) -> float | None:
    return None if value is None else -value


def compile_items(jobs: Sequence[Job]) -> list[CompileItem]:
    return [CompileItem(j, e, n) for j in jobs for n, e in enumerate(j.compile.recent)]
