"""What ``xmon top`` shows, computed from a snapshot: pure functions, no textual.

Devices come from two places: hardware collectors (``Snapshot.devices``: utilisation, power,
temperature, memory the driver sees) and jobs (``Job.devices``: the PJRT allocator's view).
A job device is shown on the hardware row of the same platform and local hardware id; job
devices no hardware collector found (CPU, or a host without NVML/libtpu) get rows of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from xmon.model import Device, Job, JobDevice, Snapshot


@dataclass(frozen=True)
class DeviceRow:
    key: str  # stable across snapshots: "hw:<source>:<index>" or "job:<pid>:<device id>"
    label: str  # e.g. "tpu 0", "cpu 3"
    device_kind: str
    job_names: tuple[str, ...]
    pids: tuple[int, ...]
    utilization_ratio: float | None  # hardware utilisation, else duty cycle
    memory_used_bytes: int | None
    memory_limit_bytes: int | None
    memory_peak_bytes: int | None
    power_watts: float | None
    temperature_celsius: float | None
    # Of the one job on this device: its share of sampled time running there (execution
    # ledger). HFU and MFU are per job (SPMD programs run on all its devices alike): jobs table.
    busy_ratio: float | None

    @property
    def memory_ratio(self) -> float | None:
        return _ratio(self.memory_used_bytes, self.memory_limit_bytes)

    @property
    def peak_ratio(self) -> float | None:
        return _ratio(self.memory_peak_bytes, self.memory_limit_bytes)


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return part / whole


def _sum(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _max(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _matches(device: Device, job: Job, job_device: JobDevice) -> bool:
    info = job_device.info
    if info.platform != device.platform or info.local_hardware_id != device.index:
        return False
    return not device.pids or job.pid in device.pids


def device_rows(snapshot: Snapshot, pid: int | None = None) -> list[DeviceRow]:
    """Rows for every device, or only those of the job ``pid``."""
    rows: list[DeviceRow] = []
    claimed: set[tuple[int, int]] = set()
    for device in snapshot.devices:
        users = [
            (job, jd) for job in snapshot.jobs for jd in job.devices if _matches(device, job, jd)
        ]
        claimed.update((job.pid, jd.info.id) for job, jd in users)
        if pid is None or any(job.pid == pid for job, _ in users) or pid in device.pids:
            rows.append(_hardware_row(device, users))
    for job in snapshot.jobs:
        if pid is not None and job.pid != pid:
            continue
        for jd in job.devices:
            if (job.pid, jd.info.id) not in claimed:
                rows.append(_job_device_row(job, jd))
    return rows


def _hardware_row(device: Device, users: Sequence[tuple[Job, JobDevice]]) -> DeviceRow:
    hw = device.hardware
    jobs = {job.pid: job for job, _ in users}
    used = hw.memory_used_bytes
    if used is None:
        used = _sum(jd.memory.in_use_bytes for _, jd in users)
    limit = hw.memory_total_bytes
    if limit is None:
        limit = _max(jd.memory.bytes_limit for _, jd in users)
    busy = users[0][1].busy_ratio if len(users) == 1 else None  # no union of several jobs
    return DeviceRow(
        key=f"hw:{device.source}:{device.index}",
        label=f"{device.platform} {device.index}",
        device_kind=device.device_kind,
        job_names=tuple(sorted({job.job_name for job in jobs.values()})),
        pids=tuple(sorted(set(device.pids) | set(jobs))),
        utilization_ratio=hw.utilization_ratio
        if hw.utilization_ratio is not None
        else hw.duty_cycle_ratio,
        memory_used_bytes=used,
        memory_limit_bytes=limit,
        memory_peak_bytes=_max(jd.memory.peak_bytes_in_use for _, jd in users),
        power_watts=hw.power_watts,
        temperature_celsius=hw.temperature_celsius,
        busy_ratio=busy,
    )


def _job_device_row(job: Job, jd: JobDevice) -> DeviceRow:
    memory = jd.memory
    return DeviceRow(
        key=f"job:{job.pid}:{jd.info.id}",
        label=f"{jd.info.platform} {jd.info.id}",
        device_kind=jd.info.device_kind,
        job_names=(job.job_name,),
        pids=(job.pid,),
        utilization_ratio=None,
        memory_used_bytes=memory.in_use_bytes,
        memory_limit_bytes=memory.bytes_limit,
        memory_peak_bytes=memory.peak_bytes_in_use,
        power_watts=None,
        temperature_celsius=None,
        busy_ratio=jd.busy_ratio,
    )


# --- jobs ------------------------------------------------------------------------------------


def job_memory_in_use(job: Job) -> int | None:
    return _sum(d.memory.in_use_bytes for d in job.devices)


def job_memory_limit(job: Job) -> int | None:
    limits = [d.memory.bytes_limit for d in job.devices]
    return None if not limits or None in limits else _sum(limits)


def job_step_seconds(job: Job) -> float | None:
    return job.steps.p50_step_seconds


def job_busy_ratio(job: Job) -> float | None:
    """Mean busy ratio over the job's sampled devices (None before any sample)."""
    known = [d.busy_ratio for d in job.devices if d.busy_ratio is not None]
    return sum(known) / len(known) if known else None


def mfu_declared(job: Job) -> bool:
    """MFU needs the model FLOPs the job declares (xmon.step(flops=...)); without them it is
    not unknown but undefined, which views show differently from "n/a"."""
    u = job.utilization
    return job.steps.model_flops_per_step is not None or u.model_flops_utilization_ratio is not None


JOB_SORTS: dict[str, Callable[[Job], Any]] = {
    "pid": lambda j: j.pid,
    "name": lambda j: j.job_name.lower(),
    "memory": job_memory_in_use,
    "step time": job_step_seconds,
    "steps/s": lambda j: j.steps.steps_per_second,
    "MFU": lambda j: j.utilization.model_flops_utilization_ratio,
    "HFU": lambda j: j.utilization.hardware_flops_utilization_ratio,
    "BUSY": job_busy_ratio,
    "CPU": lambda j: j.process.cpu_utilization_ratio if j.process else None,
}


def sort_by(items: Iterable[Any], key: Callable[[Any], Any], reverse: bool = False) -> list[Any]:
    """Sort with unknown values (``None``) last in either direction."""
    items = list(items)
    known = [i for i in items if key(i) is not None]
    unknown = [i for i in items if key(i) is None]
    return sorted(known, key=key, reverse=reverse) + unknown


def job_by_pid(snapshot: Snapshot | None, pid: int | None) -> Job | None:
    if snapshot is None or pid is None:
        return None
    return next((j for j in snapshot.jobs if j.pid == pid), None)


def jobs_in_scope(snapshot: Snapshot, pid: int | None) -> list[Job]:
    return [j for j in snapshot.jobs if pid is None or j.pid == pid]
