"""Snapshots → ``xmon monitor`` reports: one JSON-ready dict per period.

Pure functions, no I/O and no clocks: a report is built from the current snapshot and the
snapshot of the previous report (for per-period deltas). The shape is documented in
``docs/monitor.md`` and pinned by ``docs/monitor.schema.json``; bump :data:`REPORT_SCHEMA_VERSION`
when a key changes meaning or goes away (adding keys does not bump it).

Deltas are ``null`` when there is no baseline: the first report, a job that was not in the
previous report, or a counter that went backwards (the job's agent restarted).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from xmon.model import (
    CollectorHealth,
    CompileEvent,
    CompileStats,
    Device,
    Finding,
    Goodput,
    HostSample,
    Job,
    JobDevice,
    Program,
    Snapshot,
)

# 2: model_flops_utilization_ratio is MFU from declared model FLOPs only (HFU is its own key),
# flops_per_step counts the hardware FLOPs of what executed.
REPORT_SCHEMA_VERSION = 2
GROUPS = ("system", "hardware", "jobs", "programs")
# A finding's long evidence (a stall's thread stacks, up to 64 KiB) is cut to this many
# characters in each report; xmon doctor --json has it whole.
DETAIL_MAX_CHARS = 4096

# Cumulative counters reported as {"total": ..., "delta": ...}: report key -> model field.
_STEP_COUNTERS = {"steps": "steps_total", "seconds": "step_seconds_total"}
_COMPILE_COUNTERS = {
    "compiles": "compiles_total",
    "recompiles": "recompiles_total",
    "backend_compile_seconds": "backend_compile_seconds_total",
    "trace_seconds": "trace_seconds_total",
    "lowering_seconds": "lowering_seconds_total",
    "cache_requests": "cache_requests_total",
    "cache_hits": "cache_hits_total",
    "cache_misses": "cache_misses_total",
}
_AGENT_COUNTERS = {
    "reports_sent": "reports_sent_total",
    "reports_dropped": "reports_dropped_total",
    "events_dropped": "events_dropped_total",
    "reconnects": "reconnects_total",
    "overhead_seconds": "overhead_seconds_total",
    "ledger_samples": "ledger_samples_total",
    "ledger_samples_skipped": "ledger_samples_skipped_total",
}
_PROGRAM_FIELDS = (
    "fingerprint", "name", "fun_name", "num_devices", "flops", "flops_xla", "custom_call_flops",
    "flops_lower_bound", "flops_upper_bound", "flops_branch_mix", "loops",
    "loops_unknown_trip_count",
    "transcendentals",
    "bytes_accessed", "bytes_accessed_xla", "argument_bytes", "output_bytes", "alias_bytes",
    "temp_bytes", "generated_code_bytes", "peak_memory_bytes", "compile_seconds", "compiled_at",
    "cache_hit", "in_step", "program_ids", "executions", "executions_per_second",
    "executions_window_seconds", "executions_counted_at", "executions_source",
    "device_seconds_per_execution",
)  # fmt: skip


@dataclass(frozen=True)
class ReportOptions:
    """What goes into a report: metric groups and job filters (name globs or pids)."""

    groups: frozenset[str] = frozenset(GROUPS)
    jobs: tuple[str, ...] = ()


def job_matches(job: Job, patterns: Sequence[str]) -> bool:
    """No patterns: every job. Else a pattern matches the pid exactly or the name as a glob."""
    if not patterns:
        return True
    return any(p == str(job.pid) or fnmatch.fnmatchcase(job.job_name, p) for p in patterns)


def build_report(
    snapshot: Snapshot, previous: Snapshot | None, options: ReportOptions = ReportOptions()
) -> dict[str, Any]:
    """One report. ``previous`` is the snapshot the last emitted report was built from."""
    period = snapshot.monotonic - previous.monotonic if previous is not None else None
    report: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "timestamp": rfc3339(snapshot.wall_time),
        "wall_time": snapshot.wall_time,
        "seq": snapshot.seq,
        "period_seconds": period,
        "hostname": snapshot.hostname,
        "daemon": _daemon(snapshot),
        "findings": findings_section(snapshot.findings),
    }
    if "system" in options.groups:
        report["system"] = system_section(snapshot.host)
    if "hardware" in options.groups:
        report["hardware"] = hardware_section(snapshot, previous)
    if "jobs" in options.groups:
        jobs = [j for j in snapshot.jobs if job_matches(j, options.jobs)]
        with_programs = "programs" in options.groups
        report["jobs"] = [job_section(j, previous, with_programs) for j in jobs]
    return finite(report)


def rfc3339(wall_time: float) -> str:
    stamp = datetime.fromtimestamp(wall_time, tz=UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finite(value: Any) -> Any:
    """Replace NaN and infinities (which JSON cannot carry) by ``None``, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def _daemon(snapshot: Snapshot) -> dict[str, Any]:
    d = snapshot.daemon
    return {
        "version": d.version,
        "started_at": d.started_at,
        "agents_connected": d.agents_connected,
        "reports_received_total": d.reports_received_total,
        "reports_rejected_total": d.reports_rejected_total,
        "agents_disconnected_total": d.agents_disconnected_total,
        "snapshot_schema_version": snapshot.schema_version,
    }


def system_section(host: HostSample | None) -> dict[str, Any] | None:
    """Host CPU and memory from the host collector (psutil); ``None`` if it has no sample."""
    if host is None:
        return None
    return {
        "cpu_count": host.cpu_count,
        "cpu_utilization_ratio": host.cpu_utilization_ratio,
        "per_cpu_utilization_ratio": list(host.per_cpu_utilization_ratio),
        "load_average_1m": host.load_average_1m,
        "memory_total_bytes": host.memory_total_bytes,
        "memory_used_bytes": host.memory_used_bytes,
        "memory_available_bytes": host.memory_available_bytes,
    }


def hardware_section(snapshot: Snapshot, previous: Snapshot | None) -> dict[str, Any]:
    """Accelerators found by hardware collectors (NVML, libtpu), whether or not a job runs."""
    kinds = sorted({d.device_kind for d in snapshot.devices})
    before = {c.name: c for c in previous.collectors} if previous is not None else {}
    return {
        "device_count": len(snapshot.devices),
        "device_kinds": kinds,
        "platforms": sorted({d.platform for d in snapshot.devices}),
        "devices": [_hardware_device(d) for d in snapshot.devices],
        "collectors": [_collector(c, before.get(c.name)) for c in snapshot.collectors],
    }


def _hardware_device(device: Device) -> dict[str, Any]:
    return {
        "index": device.index,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "source": device.source,
        "uuid": device.uuid,
        "pci_bus_id": device.pci_bus_id,
        "pids": list(device.pids),
        "processes": [
            {"pid": p.pid, "memory_used_bytes": p.memory_used_bytes} for p in device.processes
        ],
        "counters": dataclasses.asdict(device.hardware),
    }


def _collector(health: CollectorHealth, before: CollectorHealth | None) -> dict[str, Any]:
    return {
        "name": health.name,
        "up": health.up,
        "present": health.present,
        "errors": _counter(health.errors_total, None if before is None else before.errors_total),
        "duration_seconds": health.duration_seconds,
        "last_error": health.last_error,
    }


def _counter(total: float, before: float | None) -> dict[str, Any]:
    delta = None if before is None or total < before else total - before
    return {"total": total, "delta": delta}


def _counters(current: object, before: object | None, names: dict[str, str]) -> dict[str, Any]:
    """``{"total": {...}, "delta": {...} | None}`` for a group of cumulative counters."""
    total = {key: getattr(current, field) for key, field in names.items()}
    if before is None:
        return {"total": total, "delta": None}
    old = {key: getattr(before, field) for key, field in names.items()}
    if any(total[key] < old[key] for key in names):  # the agent restarted: no baseline
        return {"total": total, "delta": None}
    return {"total": total, "delta": {key: total[key] - old[key] for key in names}}


def _same_job(previous: Snapshot | None, job: Job) -> Job | None:
    if previous is None:
        return None
    for old in previous.jobs:
        if old.pid == job.pid and old.started_at == job.started_at:
            return old
    return None


def job_section(job: Job, previous: Snapshot | None, with_programs: bool) -> dict[str, Any]:
    """One job (a JAX process with the agent): devices, memory, steps, compiles, programs."""
    old = _same_job(previous, job)
    since = previous.wall_time if old is not None and previous is not None else None
    return {
        "job_name": job.job_name,
        "pid": job.pid,
        "hostname": job.hostname,
        "platform": job.platform,
        "jax_version": job.jax_version,
        "jaxlib_version": job.jaxlib_version,
        "process_index": job.process_index,
        "process_count": job.process_count,
        "argv": list(job.argv),
        "started_at": job.started_at,
        "last_report_at": job.last_report_at,
        "devices": [job_device(d) for d in job.devices],
        "memory": job_memory(job.devices),
        "steps": _steps(job, old),
        "compile": _compile(job.compile, old.compile if old else None, since),
        "programs": _programs(job.programs, old.programs if old else None, with_programs),
        "utilization": dataclasses.asdict(job.utilization),
        "process": dataclasses.asdict(job.process) if job.process is not None else None,
        "agent": _counters(job.agent, old.agent if old else None, _AGENT_COUNTERS),
        "ledger": _ledger(job, old),
        "findings": findings_section(job.findings),
        "fleet": dataclasses.asdict(job.fleet) if job.fleet is not None else None,
        "step_breakdown": (
            dataclasses.asdict(job.step_breakdown) if job.step_breakdown is not None else None
        ),
        "goodput": _goodput(job.goodput),
    }


def _goodput(goodput: Goodput | None) -> dict[str, Any] | None:
    if goodput is None:
        return None
    return {
        "wall_seconds": goodput.wall_seconds,
        "seconds": dict(goodput.seconds),
        "ratio": goodput.ratio,
        "ratio_5m": goodput.ratio_5m,
        "ratio_1h": goodput.ratio_1h,
        "biggest_badput": goodput.biggest_badput,
        "steps_marked": goodput.steps_marked,
        "restart_seconds": goodput.restart_seconds,
    }


def findings_section(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """Findings, worst first, as the daemon holds them (xmon.findings; docs/doctor.md)."""
    return [_finding(f) for f in findings]


def _finding(finding: Finding) -> dict[str, Any]:
    detail = finding.detail
    return {
        "kind": finding.kind,
        "severity": finding.severity,
        "since": finding.since,
        "summary": finding.summary,
        "subject": finding.subject,
        "value": finding.value,
        "evidence": [{"name": name, "value": value} for name, value in finding.evidence],
        "fix": finding.fix,
        "detail": detail[:DETAIL_MAX_CHARS],
        "detail_truncated": len(detail) > DETAIL_MAX_CHARS,
    }


def job_device(device: JobDevice) -> dict[str, Any]:
    info = device.info
    memory = dataclasses.asdict(device.memory)
    memory["in_use_bytes"] = device.memory.in_use_bytes
    return {
        "id": info.id,
        "platform": info.platform,
        "device_kind": info.device_kind,
        "process_index": info.process_index,
        "local_hardware_id": info.local_hardware_id,
        "coords": list(info.coords) if info.coords is not None else None,
        "core_on_chip": info.core_on_chip,
        "slice_index": info.slice_index,
        "memory": memory,
        "busy_ratio": device.busy_ratio,
    }


def _sum(values: Iterable[int | None]) -> int | None:
    """Sum over devices, ``None`` if any device does not know it (a partial sum misleads)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def job_memory(devices: Sequence[JobDevice]) -> dict[str, Any]:
    """The job's device memory summed over its devices."""
    if not devices:
        return {"in_use_bytes": None, "peak_bytes_in_use": None, "bytes_limit": None}
    return {
        "in_use_bytes": _sum(d.memory.in_use_bytes for d in devices),
        "peak_bytes_in_use": _sum(d.memory.peak_bytes_in_use for d in devices),
        "bytes_limit": _sum(d.memory.bytes_limit for d in devices),
    }


def _steps(job: Job, old: Job | None) -> dict[str, Any]:
    s = job.steps
    section = _counters(s, old.steps if old else None, _STEP_COUNTERS)
    if s.counted_total is None:  # inferred steps have a rate, and nobody counts them
        section.update(total={}, delta=None)
    section.update(
        last_step_seconds=s.last_step_seconds,
        p50_step_seconds=s.p50_step_seconds,
        p90_step_seconds=s.p90_step_seconds,
        p99_step_seconds=s.p99_step_seconds,
        steps_per_second=s.steps_per_second,
        flops_per_step=s.flops_per_step,
        bytes_per_step=s.bytes_per_step,
        model_flops_per_step=s.model_flops_per_step,
        tokens_per_step=s.tokens_per_step,
        inferred=s.inferred,
        inferred_from=s.inferred_from,
        steps_begun=s.steps_begun_total,
        open_step_seconds=s.open_step_seconds,
        stall_waits_in=s.stall_waits_in,
    )
    return section


def _ledger(job: Job, old: Job | None) -> dict[str, Any]:
    """The execution ledger the busy ratios and execution rates come from."""
    ledger = job.ledger
    before = old.ledger.parse_errors_total if old is not None else None
    sampled = ledger.samples > 0  # without samples the model's 0.0 seconds mean "no window"
    return {
        "samples": ledger.samples,
        "sampled_seconds": ledger.sampled_seconds if sampled else None,
        "window_seconds": ledger.window_seconds if sampled else None,
        "last_sample_at": ledger.last_sample_at,
        "next_sample_at": job.agent.ledger_next_sample_at,
        "sample_seconds_asked": ledger.sample_seconds_asked,
        "sample_seconds_most": ledger.sample_seconds_most,
        "parse_errors": _counter(ledger.parse_errors_total, before),
    }


def _compile(stats: CompileStats, old: CompileStats | None, since: float | None) -> dict[str, Any]:
    section = _counters(stats, old, _COMPILE_COUNTERS)
    section["events"] = [_event(e) for e in stats.recent if since is None or e.wall_time > since]
    return section


def _event(event: CompileEvent) -> dict[str, Any]:
    return {
        "fun_name": event.fun_name,
        "duration_seconds": event.duration_seconds,
        "wall_time": event.wall_time,
        "cache_hit": event.cache_hit,
    }


def _programs(
    programs: Sequence[Program], old: Sequence[Program] | None, with_items: bool
) -> dict[str, Any]:
    known = {p.fingerprint for p in old} if old is not None else None
    new = None if known is None else sum(1 for p in programs if p.fingerprint not in known)
    section: dict[str, Any] = {"count": len(programs), "new": new}
    if with_items:
        section["items"] = [{f: getattr(p, f) for f in _PROGRAM_FIELDS} for p in programs]
    return section
