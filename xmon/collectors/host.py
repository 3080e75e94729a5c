"""The ``host`` collector: this host's CPU, memory and load, and the attached jobs' processes.

Reading (psutil calls, :func:`read_host` / :func:`read_process`) is kept apart from the maths
(:func:`host_sample` / :func:`process_sample`, pure functions of two readings), so the rates
are tested with tables and the reading with the real psutil. The psutil module is injectable;
psutil itself reads ``psutil.PROCFS_PATH`` (default ``/proc``).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from xmon.collectors.base import CollectContext, CollectorOutput, register
from xmon.model import HostSample, ProcessSample


@dataclass(frozen=True)
class HostReading:
    """Raw host numbers of one read; rates need two of them."""

    hostname: str
    cpu_count: int  # psutil.cpu_count() (logical CPUs)
    cpu_times: Mapping[str, float]  # psutil.cpu_times()._asdict(), seconds since boot
    per_cpu_times: tuple[Mapping[str, float], ...]  # psutil.cpu_times(percpu=True)
    memory_total_bytes: int  # psutil.virtual_memory().total
    memory_used_bytes: int  # psutil.virtual_memory().used
    memory_available_bytes: int  # psutil.virtual_memory().available
    load_average_1m: float | None  # psutil.getloadavg()[0]; None where unsupported


@dataclass(frozen=True)
class ProcessReading:
    """Raw numbers of one process at one moment."""

    cpu_seconds_total: float  # Process.cpu_times(): user + system (children excluded)
    resident_memory_bytes: int  # Process.memory_info().rss
    num_threads: int  # Process.num_threads()
    monotonic: float  # when it was read (the tick's CollectContext.monotonic)
    run_queue_seconds_total: float | None = None  # its threads' waits for a CPU (schedstat)


# --- maths ------------------------------------------------------------------------------------


def cpu_busy_ratio(before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
    """Busy share of CPU time between two ``cpu_times`` readings, 0-1; None if none passed.

    Same accounting as psutil.cpu_percent (and htop): guest time is already inside user/nice,
    iowait is idle. Computed here rather than by cpu_percent(interval=None) because that keeps
    its previous sample per calling thread and module-wide, so any other caller would shorten
    our interval.
    """
    deltas = {key: max(0.0, after[key] - before.get(key, after[key])) for key in after}
    total = sum(deltas.values()) - deltas.get("guest", 0.0) - deltas.get("guest_nice", 0.0)
    busy = total - deltas.get("idle", 0.0) - deltas.get("iowait", 0.0)
    return min(1.0, max(0.0, busy / total)) if total > 0 else None


def per_cpu_busy_ratios(
    before: tuple[Mapping[str, float], ...], after: tuple[Mapping[str, float], ...]
) -> tuple[float, ...]:
    """Per-CPU busy ratios; empty when the CPU set changed (hotplug) or a CPU saw no time."""
    if len(before) != len(after):
        return ()
    ratios = [cpu_busy_ratio(b, a) for b, a in zip(before, after, strict=True)]
    return () if any(r is None for r in ratios) else tuple(r for r in ratios if r is not None)


def host_sample(reading: HostReading, previous: HostReading | None) -> HostSample:
    """The HostSample of ``reading``; utilisation is None on the first read (no interval)."""
    total: float | None = None
    per_cpu: tuple[float, ...] = ()
    if previous is not None:
        total = cpu_busy_ratio(previous.cpu_times, reading.cpu_times)
        per_cpu = per_cpu_busy_ratios(previous.per_cpu_times, reading.per_cpu_times)
    return HostSample(
        hostname=reading.hostname,
        cpu_count=reading.cpu_count,
        cpu_utilization_ratio=total,
        memory_total_bytes=reading.memory_total_bytes,
        memory_used_bytes=reading.memory_used_bytes,
        memory_available_bytes=reading.memory_available_bytes,
        load_average_1m=reading.load_average_1m,
        per_cpu_utilization_ratio=per_cpu,
    )


def process_cpu_ratio(reading: ProcessReading, previous: ProcessReading | None) -> float | None:
    """CPU seconds per wall second since ``previous`` (of one core; > 1 with threads)."""
    if previous is None or reading.monotonic <= previous.monotonic:
        return None
    used = max(0.0, reading.cpu_seconds_total - previous.cpu_seconds_total)
    return used / (reading.monotonic - previous.monotonic)


def cpu_wait_threads(reading: ProcessReading, previous: ProcessReading | None) -> float | None:
    """Run-queue seconds per wall second since ``previous``: threads waiting for a CPU."""
    if previous is None or reading.monotonic <= previous.monotonic:
        return None
    now, before = reading.run_queue_seconds_total, previous.run_queue_seconds_total
    if now is None or before is None:
        return None
    return max(0.0, now - before) / (reading.monotonic - previous.monotonic)


def process_sample(reading: ProcessReading, previous: ProcessReading | None) -> ProcessSample:
    return ProcessSample(
        cpu_utilization_ratio=process_cpu_ratio(reading, previous),
        cpu_seconds_total=reading.cpu_seconds_total,
        resident_memory_bytes=reading.resident_memory_bytes,
        num_threads=reading.num_threads,
        cpu_wait_threads=cpu_wait_threads(reading, previous),
    )


# --- reading ----------------------------------------------------------------------------------


def read_host(ps: ModuleType, hostname: str) -> HostReading:
    per_cpu = tuple(t._asdict() for t in ps.cpu_times(percpu=True))
    memory = ps.virtual_memory()
    try:
        load: float | None = float(ps.getloadavg()[0])
    except (AttributeError, OSError):
        load = None
    return HostReading(
        hostname=hostname,
        cpu_count=ps.cpu_count() or len(per_cpu),
        cpu_times=ps.cpu_times()._asdict(),
        per_cpu_times=per_cpu,
        memory_total_bytes=int(memory.total),
        memory_used_bytes=int(memory.used),
        memory_available_bytes=int(memory.available),
        load_average_1m=load,
    )


def read_process(process: Any, monotonic: float, procfs: str = "/proc") -> ProcessReading:
    """One consistent read of a ``psutil.Process`` (oneshot: one pass over /proc/PID/*)."""
    with process.oneshot():
        times = process.cpu_times()
        return ProcessReading(
            cpu_seconds_total=float(times.user + times.system),
            resident_memory_bytes=int(process.memory_info().rss),
            num_threads=int(process.num_threads()),
            monotonic=monotonic,
            run_queue_seconds_total=run_queue_seconds(Path(procfs), int(process.pid)),
        )


def run_queue_seconds(procfs: Path, pid: int) -> float | None:
    """Seconds the process's threads have waited on a run queue (the second field of each
    ``/proc/PID/task/TID/schedstat``); None where the kernel keeps no schedstat."""
    total, found = 0, False
    try:
        tasks = list((procfs / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
            total, found = total + int(fields[1]), True
        except (OSError, IndexError, ValueError):
            continue  # the thread ended while we read
    return total / 1e9 if found else None


@register("host", help="host CPU, memory and load, and each attached job's CPU and RSS (psutil)")
class HostCollector:
    """Not thread-safe by itself; the runner never calls ``collect`` concurrently. Rates (CPU)
    span the time since the previous call."""

    name = "host"

    def __init__(self, ps: ModuleType = psutil, hostname: str | None = None) -> None:
        self._ps = ps
        self._hostname = hostname or socket.gethostname()
        self._last_host: HostReading | None = None
        # pid -> (Process, last reading); kept so the CPU rate has a previous sample and
        # psutil can tell a reused pid (it remembers each Process' create time).
        self._processes: dict[int, tuple[Any, ProcessReading]] = {}

    @property
    def tracked_pids(self) -> tuple[int, ...]:
        return tuple(sorted(self._processes))

    def collect(self, context: CollectContext) -> CollectorOutput:
        reading = read_host(self._ps, self._hostname)
        sample = host_sample(reading, self._last_host)
        self._last_host = reading
        return CollectorOutput(host=sample, processes=self._sample_processes(context))

    def _sample_processes(self, context: CollectContext) -> dict[int, ProcessSample]:
        for pid in set(self._processes) - set(context.pids):
            del self._processes[pid]  # the job detached
        samples = {}
        for pid in dict.fromkeys(context.pids):
            sample = self._sample_pid(pid, context.monotonic)
            if sample is not None:
                samples[pid] = sample
        return samples

    def _sample_pid(self, pid: int, monotonic: float) -> ProcessSample | None:
        """None, silently, when the process is gone or not ours to read."""
        ps = self._ps
        try:
            process, previous = self._tracked(pid)
            reading = read_process(process, monotonic, getattr(ps, "PROCFS_PATH", "/proc"))
        except (ps.NoSuchProcess, ps.AccessDenied):
            self._processes.pop(pid, None)
            return None
        self._processes[pid] = (process, reading)
        return process_sample(reading, previous)

    def _tracked(self, pid: int) -> tuple[Any, ProcessReading | None]:
        if pid in self._processes:
            process, previous = self._processes[pid]
            if process.is_running():  # False also when the pid now names another process
                return process, previous
        return self._ps.Process(pid), None
