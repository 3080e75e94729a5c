"""Profiling series: captures per job, kind and trigger, and the health of file exporters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmon.model import Snapshot

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder


def add_profiling_series(b: FamilyBuilder, snapshot: Snapshot) -> None:
    for job in snapshot.jobs:
        for c in job.captures:
            labels = (job.job_name, job.pid, c.kind, c.trigger)
            b.add("xmon_job_captures_total", labels, c.ok_total)
            b.add("xmon_job_capture_failures_total", labels, c.failed_total)
            b.add("xmon_job_last_capture_timestamp_seconds", labels, c.last_at)
    for e in snapshot.exporters:
        b.add("xmon_exporter_up", (e.name,), e.up)
        b.add("xmon_exporter_errors_total", (e.name,), e.errors_total)
