"""Bounded recent history of the numbers ``xmon top`` draws as sparklines.

One point per snapshot shown; a series whose device or job went away is dropped after it has
been absent for a whole window, so the view does not grow without bound.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from xmon.model import Snapshot
from xmon.top import fmt
from xmon.top.viewmodel import device_rows, job_busy_ratio, job_memory_in_use, mfu_declared

DEFAULT_POINTS = 120

# label, unit ("ratio" | "bytes" | "rate"), fixed scale top or None, value
Point = tuple[str, str, float | None, float | None]


@dataclass
class Series:
    label: str
    unit: str  # "ratio" | "bytes" | "rate": how the view formats the latest value
    top: float | None  # fixed scale (1.0 for ratios), else scaled to the series' max
    points: deque[float | None]
    missing: int = 0  # consecutive snapshots without this series


@dataclass
class History:
    size: int = DEFAULT_POINTS
    series: dict[str, Series] = field(default_factory=dict)

    def add(self, snapshot: Snapshot) -> None:
        values = dict(self._values(snapshot))
        for key, (label, unit, top, value) in values.items():
            series = self.series.get(key)
            if series is None:
                series = self.series[key] = Series(label, unit, top, deque(maxlen=self.size))
            series.label = label  # marks in it can change (steps become inferred)
            series.points.append(value)
            series.missing = 0
        for key in list(self.series):
            if key not in values:
                self._age(key)

    def _age(self, key: str) -> None:
        series = self.series[key]
        series.points.append(None)
        series.missing += 1
        if series.missing >= self.size:
            del self.series[key]

    def _values(self, snapshot: Snapshot) -> list[tuple[str, Point]]:
        return [*_host_points(snapshot), *_job_points(snapshot), *_device_points(snapshot)]

    def latest(self, key: str) -> float | None:
        series = self.series.get(key)
        return series.points[-1] if series and series.points else None


def _host_points(snapshot: Snapshot) -> list[tuple[str, Point]]:
    host = snapshot.host
    if host is None:
        return []
    memory = host.memory_used_bytes / host.memory_total_bytes if host.memory_total_bytes else None
    return [
        ("host:cpu", ("host CPU", "ratio", 1.0, host.cpu_utilization_ratio)),
        ("host:mem", ("host memory", "ratio", 1.0, memory)),
    ]


def _job_points(snapshot: Snapshot) -> list[tuple[str, Point]]:
    out: list[tuple[str, Point]] = []
    for job in snapshot.jobs:
        name, key = f"{job.job_name} ({job.pid})", f"job:{job.pid}"
        u = job.utilization
        steps = f"{name} {fmt.INFERRED_MARK if job.steps.inferred else ''}steps/s"
        mark = fmt.bound_mark(u.flops_lower_bound, u.flops_upper_bound)
        hfu = f"{name} HFU{' ' + mark if mark else ''}"
        out.append((f"{key}:steps", (steps, "rate", None, job.steps.steps_per_second)))
        out.append((f"{key}:hfu", (hfu, "ratio", 1.0, u.hardware_flops_utilization_ratio)))
        if mfu_declared(job):  # undeclared: no MFU at all, not a row of blanks
            out.append((f"{key}:mfu", (f"{name} MFU", "ratio", 1.0,
                                       u.model_flops_utilization_ratio)))  # fmt: skip
        busy = job_busy_ratio(job)
        if busy is not None:  # before the first execution sample the row would stay blank
            out.append((f"{key}:busy", (f"{name} busy", "ratio", 1.0, busy)))
        out.append((f"{key}:mem", (f"{name} memory", "bytes", None, job_memory_in_use(job))))
    return out


def _device_points(snapshot: Snapshot) -> list[tuple[str, Point]]:
    out: list[tuple[str, Point]] = []
    for row in device_rows(snapshot):
        if row.utilization_ratio is not None:
            out.append(
                (f"{row.key}:util", (f"{row.label} util", "ratio", 1.0, row.utilization_ratio))
            )
        if row.memory_ratio is not None:
            out.append((f"{row.key}:mem", (f"{row.label} memory", "ratio", 1.0, row.memory_ratio)))
        else:
            used = row.memory_used_bytes
            out.append((f"{row.key}:mem", (f"{row.label} memory", "bytes", None, used)))
    return out
