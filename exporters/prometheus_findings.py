"""Job series of the findings (xmon.findings): one gauge per kind and severity, plus the numbers
the alerts use (steady-state recompiles, seconds since the last step)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from xmon.model import Job

if TYPE_CHECKING:
    from .prometheus_families import FamilyBuilder

JobKey = tuple[str, int]


def add_finding_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    c = job.compile
    b.add("xmon_job_steady_recompiles_total", key, c.steady_recompiles_total)
    b.add("xmon_job_eager_compiles_total", key, c.eager_compiles_total)
    b.add("xmon_job_seconds_since_last_step", key, job.steps.seconds_since_last_step)
    # Several findings may share a kind (one per recompiled function): they are counted.
    counts = Counter((f.kind, f.severity) for f in job.findings)
    for (kind, severity), count in sorted(counts.items()):
        b.add("xmon_job_finding", (*key, kind, severity), count)
