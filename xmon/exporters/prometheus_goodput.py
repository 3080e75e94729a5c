"""Job series of the wall-time account (xmon.goodput): where the process's time went, its
goodput ratios and what its restart cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmon.model import Job

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder, JobKey


def add_goodput_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    goodput = job.goodput
    if goodput is None:
        return
    for bucket, seconds in goodput.seconds:
        b.add("xmon_job_wall_seconds", (*key, bucket), seconds)
    for window, ratio in (("life", goodput.ratio), ("5m", goodput.ratio_5m),
                          ("1h", goodput.ratio_1h)):  # fmt: skip
        b.add("xmon_job_goodput_ratio", (*key, window), ratio)
    b.add("xmon_job_restart_lost_seconds", key, goodput.restart_seconds)
