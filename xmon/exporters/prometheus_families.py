"""Snapshot -> Prometheus metric families: a pure function driven by
:mod:`xmon.exporters.metrics_table`.

Families are rebuilt from each snapshot, so the series of a job that has gone simply stop
appearing (no stale gauges to remove). A ``None`` in the snapshot means "unknown here" and is
left out, never written as 0.
"""

from __future__ import annotations

import platform
from collections.abc import Callable

from prometheus_client.core import Metric

from xmon.exporters.metrics_table import REFUSAL_BOUNDS
from xmon.model import SCHEMA_VERSION, Device, DeviceMemory, Job, SliceInfo, Snapshot

from .prometheus_builder import FamilyBuilder, Number
from .prometheus_execution import add_ledger_series, add_step_series
from .prometheus_findings import add_finding_series, add_host_finding_series
from .prometheus_fleet import add_fleet_series
from .prometheus_goodput import add_goodput_series
from .prometheus_gpu import add_gpu_series
from .prometheus_profiling import add_profiling_series
from .prometheus_programs import ProgramSeriesCache, add_program_series
from .prometheus_tpu import add_runtime_series, add_tpu_series

DEFAULT_PROGRAM_LIMIT = 50


def self_families(version: str, schema_version: int, up: bool) -> FamilyBuilder:
    b = FamilyBuilder()
    b.info("xmon_build_info", (version, platform.python_version(), schema_version))
    b.add("xmon_up", (), 1 if up else 0)
    return b


def bootstrap_families(version: str) -> list[Metric]:
    """What /metrics shows before the first snapshot: the daemon is there, no data yet."""
    return self_families(version, SCHEMA_VERSION, up=False).families()


def snapshot_families(
    snapshot: Snapshot,
    program_limit: int = DEFAULT_PROGRAM_LIMIT,
    programs: ProgramSeriesCache | None = None,
) -> list[Metric]:
    """All metric families of one snapshot, each named and described by
    xmon.exporters.metrics_table; ``programs`` keeps each job's program series from one render
    to the next."""
    b = self_families(snapshot.daemon.version, snapshot.schema_version, up=True)
    _daemon(b, snapshot)
    _host(b, snapshot)
    add_host_finding_series(b, snapshot)
    _slice(b, snapshot.slice_info)
    job_names = {job.pid: job.job_name for job in snapshot.jobs}
    for device in snapshot.devices:
        _device(b, device, job_names)
    add_runtime_series(b, snapshot.runtime_services)
    for job in snapshot.jobs:
        _job(b, job, program_limit, programs)
    add_profiling_series(b, snapshot)
    return b.families()


def _daemon(b: FamilyBuilder, s: Snapshot) -> None:
    d = s.daemon
    b.add("xmon_daemon_start_time_seconds", (), d.started_at or None)
    b.add("xmon_daemon_goodput_floor_ratio", (), d.goodput_floor)
    b.add("xmon_snapshot_timestamp_seconds", (), s.wall_time)
    b.add("xmon_agents_connected", (), d.agents_connected)
    b.add("xmon_daemon_reports_received_total", (), d.reports_received_total)
    b.add("xmon_daemon_reports_rejected_total", (), d.reports_rejected_total)
    b.add("xmon_daemon_agent_disconnects_total", (), d.agents_disconnected_total)
    b.add("xmon_daemon_config_reloads_total", (), d.config_reloads_total)
    b.add("xmon_daemon_config_reload_failures_total", (), d.config_reload_failures_total)
    b.add("xmon_daemon_config_last_reload_successful", (), d.config_last_reload_successful)
    for bound in REFUSAL_BOUNDS:
        b.add("xmon_daemon_refused_total", (bound,), d.refused_total.get(bound, 0))
    for c in s.collectors:
        b.add("xmon_collector_up", (c.name,), c.up)
        b.add("xmon_collector_errors_total", (c.name,), c.errors_total)
        b.add("xmon_collector_duration_seconds", (c.name,), c.duration_seconds)
        b.add("xmon_collector_present", (c.name,), c.present)


def _host(b: FamilyBuilder, s: Snapshot) -> None:
    h = s.host
    if h is None:
        return
    b.info("xmon_host_info", (h.hostname, h.cpu_count))
    b.add("xmon_host_cpu_utilization_ratio", (), h.cpu_utilization_ratio)
    b.add("xmon_host_memory_total_bytes", (), h.memory_total_bytes)
    b.add("xmon_host_memory_used_bytes", (), h.memory_used_bytes)
    b.add("xmon_host_memory_available_bytes", (), h.memory_available_bytes)
    b.add("xmon_host_load1", (), h.load_average_1m)


def _slice(b: FamilyBuilder, s: SliceInfo | None) -> None:
    if s is None:
        return
    b.info(
        "xmon_slice_info",
        (s.slice, s.slice_index, s.worker, s.num_slices, s.num_workers, s.accelerator_type,
         s.source),
    )  # fmt: skip


def _device(b: FamilyBuilder, d: Device, job_names: dict[int, str]) -> None:
    key = (d.index, d.device_kind, d.platform)
    b.info("xmon_device_info", (*key, d.uuid, d.pci_bus_id, d.source))
    hw = d.hardware
    b.add("xmon_device_memory_used_bytes", key, hw.memory_used_bytes)
    b.add("xmon_device_memory_total_bytes", key, hw.memory_total_bytes)
    b.add("xmon_device_utilization_ratio", key, hw.utilization_ratio)
    b.add("xmon_device_duty_cycle_ratio", key, hw.duty_cycle_ratio)
    b.add("xmon_device_power_watts", key, hw.power_watts)
    b.add("xmon_device_temperature_celsius", key, hw.temperature_celsius)
    add_gpu_series(b, d, key, job_names)
    add_tpu_series(b, d, key)


# --- jobs ------------------------------------------------------------------------------------

_MEMORY: tuple[tuple[str, Callable[[DeviceMemory], Number | None]], ...] = (
    ("xmon_job_device_memory_in_use_bytes", lambda m: m.in_use_bytes),
    ("xmon_job_device_memory_peak_bytes", lambda m: m.peak_bytes_in_use),
    ("xmon_job_device_memory_limit_bytes", lambda m: m.bytes_limit),
    ("xmon_job_device_memory_reserved_bytes", lambda m: m.bytes_reserved),
    ("xmon_job_device_memory_largest_free_block_bytes", lambda m: m.largest_free_block_bytes),
    ("xmon_job_device_memory_largest_alloc_bytes", lambda m: m.largest_alloc_size),
    ("xmon_job_device_memory_pool_bytes", lambda m: m.pool_bytes),
    ("xmon_job_device_allocations_total", lambda m: m.num_allocs),
    ("xmon_job_device_memory_fragmentation_ratio", lambda m: m.fragmentation_ratio),
    ("xmon_job_device_memory_read_timestamp_seconds", lambda m: m.read_at),
)


def _job(
    b: FamilyBuilder, job: Job, program_limit: int, programs: ProgramSeriesCache | None
) -> None:
    key = (job.job_name, job.pid)
    b.info(
        "xmon_job_info",
        (*key, job.hostname, job.platform, job.jax_version, job.jaxlib_version,
         job.process_index, job.process_count),
    )  # fmt: skip
    b.add("xmon_job_start_time_seconds", key, job.started_at or None)
    b.add("xmon_job_pid_verified", key, 1.0 if job.pid_verified else 0.0)
    _job_devices(b, job, key)
    _job_compile(b, job, key)
    add_program_series(b, job, key, program_limit, programs)
    add_step_series(b, job, key)
    _job_process_and_agent(b, job, key)
    add_ledger_series(b, job, key)
    add_finding_series(b, job, key)
    add_fleet_series(b, job, key)
    add_goodput_series(b, job, key)


def _job_devices(b: FamilyBuilder, job: Job, key: tuple[str, int]) -> None:
    for jd in job.devices:
        info = jd.info
        dev = (*key, info.id, info.device_kind, info.platform)
        coords = None if info.coords is None else ",".join(str(c) for c in info.coords)
        b.info(
            "xmon_job_device_info",
            (*dev, info.process_index, coords, info.local_hardware_id, info.core_on_chip,
             info.slice_index),
        )  # fmt: skip
        for name, get in _MEMORY:
            b.add(name, dev, get(jd.memory))
        b.add("xmon_job_device_busy_ratio", dev, jd.busy_ratio)


def _job_compile(b: FamilyBuilder, job: Job, key: tuple[str, int]) -> None:
    c = job.compile
    b.add("xmon_job_compiles_total", key, c.compiles_total)
    b.add("xmon_job_recompiles_total", key, c.recompiles_total)
    phases = (
        ("trace", c.trace_seconds_total),
        ("lowering", c.lowering_seconds_total),
        ("backend", c.backend_compile_seconds_total),
    )
    for phase, seconds in phases:
        b.add("xmon_job_compile_seconds_total", (*key, phase), seconds)
    b.add("xmon_job_compilation_cache_requests_total", key, c.cache_requests_total)
    b.add("xmon_job_compilation_cache_hits_total", key, c.cache_hits_total)
    b.add("xmon_job_compilation_cache_misses_total", key, c.cache_misses_total)


def _job_process_and_agent(b: FamilyBuilder, job: Job, key: tuple[str, int]) -> None:
    p = job.process
    if p is not None:
        b.add("xmon_job_process_cpu_seconds_total", key, p.cpu_seconds_total)
        b.add("xmon_job_process_resident_memory_bytes", key, p.resident_memory_bytes)
        b.add("xmon_job_process_cpu_utilization_ratio", key, p.cpu_utilization_ratio)
        b.add("xmon_job_process_threads", key, p.num_threads)
    a = job.agent
    b.add("xmon_agent_reports_sent_total", key, a.reports_sent_total)
    b.add("xmon_agent_reports_dropped_total", key, a.reports_dropped_total)
    b.add("xmon_agent_events_dropped_total", key, a.events_dropped_total)
    b.add("xmon_agent_reconnects_total", key, a.reconnects_total)
    b.add("xmon_agent_overhead_seconds_total", key, a.overhead_seconds_total)
    b.add("xmon_agent_last_report_timestamp_seconds", key, job.last_report_at or None)
    for capability in job.capabilities:
        labels = (*key, capability.name, capability.unavailable_reason)
        b.add("xmon_agent_capability_available", labels, capability.available)
