"""Job series that tell the processes of one multi-process job apart (xmon.fleet).

With collectives every process's step takes as long as the slowest one's; these series carry
what differs: where each step's time goes on the process's devices, how far its steps got,
and where it waits when stalled. The recording and alert rules join them with
xmon_job_fleet_info to rank a job's processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmon.model import Job

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder, JobKey


def add_fleet_series(b: FamilyBuilder, job: Job, key: JobKey) -> None:
    fleet = job.fleet
    if fleet is not None:
        b.info(
            "xmon_job_fleet_info",
            (*key, fleet.job_key, fleet.process_index, fleet.process_count, fleet.slice_index,
             fleet.worker),
        )  # fmt: skip
    steps = job.steps
    if steps.steps_begun_total:
        b.add("xmon_job_steps_begun_total", key, steps.steps_begun_total)
    b.add("xmon_job_open_step_seconds", key, steps.open_step_seconds)
    if steps.stall_waits_in is not None:
        b.add("xmon_job_stalled", (*key, steps.stall_waits_in), 1)
    split = job.step_breakdown
    if split is not None:
        b.add("xmon_job_step_host_seconds", key, split.host_seconds)
        b.add("xmon_job_step_device_compute_seconds", key, split.compute_seconds)
        b.add("xmon_job_step_device_collective_seconds", key, split.collective_seconds)
