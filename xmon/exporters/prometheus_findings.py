"""Series of the findings (xmon.findings): one gauge per kind and severity for each job and for
the host, plus the numbers the alerts use (steady-state recompiles, seconds since the last
step)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from xmon.model import Finding, Job, Snapshot

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder, JobKey


def add_finding_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    c = job.compile
    b.add("xmon_job_steady_recompiles_total", key, c.steady_recompiles_total)
    b.add("xmon_job_eager_compiles_total", key, c.eager_compiles_total)
    b.add("xmon_job_seconds_since_last_step", key, job.steps.seconds_since_last_step)
    for (kind, severity), count in _counted(job.findings):
        b.add("xmon_job_finding", (*key, kind, severity), count)


def add_host_finding_series(b: FamilyBuilder, snapshot: Snapshot) -> None:
    for (kind, severity), count in _counted(snapshot.findings):
        b.add("xmon_host_finding", (kind, severity), count)


def _counted(findings: tuple[Finding, ...]) -> list[tuple[tuple[str, str], int]]:
    """Several findings may share a kind (one per recompiled function, one per GPU): they are
    counted."""
    return sorted(Counter((f.kind, f.severity) for f in findings).items())
