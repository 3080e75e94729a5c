"""What agents send, made the daemon's model objects once, where it arrives.

Each message an agent sends is read here and nowhere else: what the daemon keeps of it is
cleaned (labels bounded, non-finite numbers dropped: ``sanitize``) and cut to the job's bounds
on the way (lists past ``devices_per_job``, ``programs_per_job`` and ``stats_per_device``,
strings past their lengths: ``report_strings``), each cut counted as refused, so that job
state, the tick, detectors and exporters read plain frozen dataclasses (xmon.daemon.received)
and never a protobuf message. What is past a bound costs nothing more than being counted: a
job announcing 20,000 devices costs what 256 do.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format

from xmon.daemon.bounds import StateBudget
from xmon.daemon.intake.report_strings import cut_report_strings
from xmon.daemon.intake.sanitize import (
    finite,
    finite_tuple,
    optional_finite,
    optional_wall,
    scrub,
    wall_time,
)
from xmon.daemon.received import (
    HELLO_BYTES,
    MAX_ARGV,
    MAX_LABEL_CHARS,
    PARTS_BYTES,
    READING_BYTES,
    RECENT_COMPILES,
    STAT_BYTES,
    STEP_WINDOW,
    GoodputAccount,
    Hello,
    MemoryReading,
    OomReport,
    Report,
    ReportParts,
    Stall,
    StepCounters,
    capabilities_bytes,
    clean_label,
    clean_text,
    functions_bytes,
    stall_bytes,
    text_bytes,
)
from xmon.execution.samples import MAX_STEP_BEGINS, ExecutionSample
from xmon.findings.oom import LiveArrayRow, OomEvent, ProgramMemory
from xmon.findings.recompiles import FunctionCompiles
from xmon.goodput.account import BUCKETS as ACCOUNT_BUCKETS
from xmon.model import (
    AgentHealth,
    Branch,
    Capability,
    CompileEvent,
    CompileStats,
    Conditional,
    DeviceInfo,
    FleetIdentity,
    Program,
)
from xmon.wire.proto import xmon_pb2
from xmon.wire.protocol import optional_field_names

MAX_PROGRAM_IDS = 64  # module ids kept per program (agents send at most 16)
# A program's conditionals taken, their branches and each branch's ops (the agent sends at most
# 8 conditionals, of two ops a branch; lax.switch has a branch per case)
MAX_CONDITIONALS = 8
MAX_BRANCHES = 64
MAX_BRANCH_OPS = 2
MAX_FUNCTIONS = 16  # recompiled functions kept (the agent sends at most 16)
MAX_CAPABILITIES = 16  # the agent has 7; a report with more is cut, not trusted
# A next-sample time further from the report than this is not a schedule (a broken clock or
# agent): it is left out.
MAX_SAMPLE_SCHEDULE_SECONDS = 24 * 3600.0

_PROGRAM_OPTIONAL = optional_field_names(xmon_pb2.ProgramInfo)


# -- hello ------------------------------------------------------------------------------------


def hello_of(message: xmon_pb2.AgentHello, budget: StateBudget) -> Hello:
    """The job's identity from its hello, and its devices up to ``devices_per_job`` (those
    past it counted as refused)."""
    scrub(message)
    devices = message.devices
    limit = budget.limits.devices_per_job
    if len(devices) > limit:
        budget.refuse("devices", len(devices) - limit)
    argv = tuple(clean_label(a) for a in message.argv[:MAX_ARGV])
    names = (
        clean_label(message.job_name),
        clean_text(message.hostname),
        clean_text(message.platform),
        clean_label(message.jax_version),
        clean_label(message.jaxlib_version),
    )
    job_name, hostname, platform, jax_version, jaxlib_version = names
    return Hello(
        job_name=job_name,
        pid=int(message.pid),
        hostname=hostname,
        platform=platform,
        jax_version=jax_version,
        jaxlib_version=jaxlib_version,
        process_index=message.process_index,
        process_count=max(1, message.process_count),
        argv=argv,
        started_at=message.started_at,
        devices=tuple(device_info_of(info) for info in devices[:limit]),
        estimated_bytes=HELLO_BYTES + sum(map(text_bytes, (*names, *argv))),
    )


def device_info_of(info: xmon_pb2.DeviceInfo) -> DeviceInfo:
    return DeviceInfo(
        id=info.id,
        platform=clean_text(info.platform),
        device_kind=clean_label(info.device_kind),
        process_index=info.process_index,
        local_hardware_id=info.local_hardware_id if info.HasField("local_hardware_id") else None,
        coords=tuple(info.coords) or None,
        core_on_chip=info.core_on_chip if info.HasField("core_on_chip") else None,
        slice_index=info.slice_index if info.HasField("slice_index") else None,
    )


# -- report -----------------------------------------------------------------------------------


def report_of(
    message: xmon_pb2.AgentReport,
    budget: StateBudget,
    known_devices: Container[int] = (),
    before: ReportParts | None = None,
) -> Report:
    """A report (the received message, cut in place) as the job state takes it: cut to the
    job's bounds first, so that what is past them costs nothing more. ``known_devices``: the
    ids of the devices the job holds, which are not converted again; ``before``: the parts of
    the job's previous report, whose capabilities, recompiled functions and identity are
    reused where the report repeats them (every report does).

    Every float is read through a check, as ``sanitize.scrub`` would leave it (a non-finite one
    unset, a wall time outside 1970..2286 unset): a report's floats are read here anyway, and
    checking each as it is read costs a tenth of walking the message first."""
    _cut_to_limits(message, budget)
    del message.compile_functions[MAX_FUNCTIONS:]  # the agent bounds them too
    cut_report_strings(message, budget)
    memory, memory_bytes = _memory(message.memory, budget)
    capabilities = _capabilities(message.capabilities, before)
    functions = _functions(message.compile_functions, before)
    stall = _stall(message.stall) if message.HasField("stall") else None
    size = PARTS_BYTES + memory_bytes + capabilities_bytes(capabilities)
    size += functions_bytes(functions) + stall_bytes(stall)
    fleet = None
    if message.HasField("process"):
        fleet = fleet_identity(message.process, before.fleet if before is not None else None)
    parts = ReportParts(
        steps=_steps(message.steps),
        compile=_compile(message.compile),
        agent=_agent_health(message.agent, wall_time(message.wall_time)),
        capabilities=capabilities,
        functions=functions,
        stall=stall,
        fleet=fleet,
        goodput=_goodput(message.goodput) if message.HasField("goodput") else None,
        memory=memory,
        estimated_bytes=size,
    )
    devices, events, programs = message.devices, message.compile_events, message.programs
    return Report(
        parts=parts,
        platform=clean_label(message.platform) if message.platform else "",
        devices=tuple(device_info_of(i) for i in devices if i.id not in known_devices)
        if devices
        else (),
        recent_step_seconds=finite_tuple(message.steps.recent_step_seconds[-STEP_WINDOW:]),
        compile_events=_compile_events(events[-RECENT_COMPILES:]) if events else (),
        programs=tuple(map(program_of, programs)) if programs else (),
    )


def _compile_events(events: Iterable[xmon_pb2.CompileEvent]) -> tuple[CompileEvent, ...]:
    return tuple(
        CompileEvent(
            fun_name=clean_label(event.fun_name),
            duration_seconds=finite(event.duration_seconds),
            wall_time=wall_time(event.wall_time),
            cache_hit=event.cache_hit,
        )
        for event in events
    )


def _cut_to_limits(report: xmon_pb2.AgentReport, budget: StateBudget) -> None:
    """A report's per-device lists past ``devices_per_job`` and its programs past
    ``programs_per_job``, dropped (and counted) before anything walks them."""
    limit = budget.limits.devices_per_job
    for per_device in (report.memory, report.devices):
        if len(per_device) > limit:
            budget.refuse("devices", len(per_device) - limit)
            del per_device[limit:]
    programs = budget.limits.programs_per_job
    if len(report.programs) > programs:
        budget.refuse("programs", len(report.programs) - programs)
        del report.programs[programs:]


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _steps(steps: xmon_pb2.StepCounters) -> StepCounters:
    return StepCounters(
        steps_total=steps.steps_total,
        step_seconds_total=finite(steps.step_seconds_total),
        flops_per_step=optional_finite(steps, "flops_per_step"),
        bytes_per_step=optional_finite(steps, "bytes_per_step"),
        tokens_per_step=optional_finite(steps, "tokens_per_step"),
        steps_begun_total=steps.steps_begun_total,
        open_step_seconds=optional_finite(steps, "open_step_seconds"),
    )


def _compile(counters: xmon_pb2.CompileCounters) -> CompileStats:
    return CompileStats(
        compiles_total=counters.compiles_total,
        recompiles_total=counters.recompiles_total,
        backend_compile_seconds_total=finite(counters.backend_compile_seconds_total),
        trace_seconds_total=finite(counters.trace_seconds_total),
        lowering_seconds_total=finite(counters.lowering_seconds_total),
        cache_requests_total=counters.cache_requests_total,
        cache_hits_total=counters.cache_hits_total,
        cache_misses_total=counters.cache_misses_total,
        steady_recompiles_total=counters.steady_recompiles_total,
        eager_compiles_total=counters.eager_compiles_total,
    )


def _agent_health(agent: xmon_pb2.AgentCounters, reported_at: float) -> AgentHealth:
    due = optional_wall(agent, "ledger_next_sample_at")
    if due is not None and abs(due - reported_at) > MAX_SAMPLE_SCHEDULE_SECONDS:
        due = None
    return AgentHealth(
        reports_sent_total=agent.reports_sent_total,
        reports_dropped_total=agent.reports_dropped_total,
        events_dropped_total=agent.events_dropped_total,
        reconnects_total=agent.reconnects_total,
        overhead_seconds_total=finite(agent.overhead_seconds_total),
        ledger_samples_total=agent.ledger_samples_total,
        ledger_samples_skipped_total=agent.ledger_samples_skipped_total,
        ledger_samples_busy_total=agent.ledger_samples_busy_total,
        ledger_next_sample_at=due,
    )


def _memory(
    samples: Iterable[xmon_pb2.DeviceMemorySample], budget: StateBudget
) -> tuple[dict[int, MemoryReading], int]:
    """Each device's allocator stats (at most ``devices_per_job`` samples: ``_cut_to_limits``)
    by device id, the last sample of a device winning; and their estimated bytes."""
    limit = budget.limits.stats_per_device
    readings: dict[int, MemoryReading] = {}
    size = 0
    for sample in samples:
        stats = sample.stats
        stats = {key: stats[key] for key in stats}  # a protobuf map's own lookups: the fastest
        if len(stats) > limit or max(map(len, stats), default=0) > MAX_LABEL_CHARS:
            stats = _bound_stats(stats, limit, budget)
        live = sample.live_array_bytes if sample.HasField("live_array_bytes") else None
        readings[sample.device_id] = MemoryReading(
            stats, live, optional_wall(sample, "live_array_read_at")
        )
        size += READING_BYTES + STAT_BYTES * len(stats) + sum(map(text_bytes, stats))
    return readings, size


def _bound_stats(stats: dict[str, int], limit: int, budget: StateBudget) -> dict[str, int]:
    """At most ``limit`` stats (the first by name), none with a name past the label bound."""
    stats = {key: value for key, value in stats.items() if len(key) <= MAX_LABEL_CHARS}
    if len(stats) > limit:
        budget.refuse("memory_stats", len(stats) - limit)
        stats = dict(sorted(stats.items())[:limit])
    return stats


def _capabilities(
    capabilities: Sequence[xmon_pb2.Capability], before: ReportParts | None
) -> tuple[Capability, ...]:
    """The agent's capabilities (at most ``MAX_CAPABILITIES``): the previous report's objects
    where it sends the same (a label cleaned once is unchanged by cleaning again)."""
    capabilities = capabilities[:MAX_CAPABILITIES]
    kept = before.capabilities if before is not None else ()
    if len(kept) == len(capabilities) and all(
        c.name == k.name and c.unavailable_reason == k.unavailable_reason
        for c, k in zip(capabilities, kept, strict=True)
    ):
        return kept
    return tuple(
        Capability(clean_label(c.name), clean_text(c.unavailable_reason)) for c in capabilities
    )


def _functions(
    rows: Sequence[xmon_pb2.FunctionCompiles], before: ReportParts | None
) -> tuple[FunctionCompiles, ...]:
    """The recompiled functions: the previous report's objects where each row is the same
    function, compiled as often and last at the same time (its changes, arguments and
    explanation are those of its latest compile)."""
    kept = before.functions if before is not None else ()
    if len(kept) == len(rows) and all(
        r.name == k.name
        and r.compiles_total == k.compiles_total
        and r.last_compiled_at == k.last_compiled_at
        for r, k in zip(rows, kept, strict=True)
    ):
        return kept
    return tuple(map(_function, rows))


def _function(row: xmon_pb2.FunctionCompiles) -> FunctionCompiles:
    return FunctionCompiles(
        name=row.name,
        compiles_total=row.compiles_total,
        steady_recompiles_total=row.steady_recompiles_total,
        eager=row.eager,
        first_compiled_at=wall_time(row.first_compiled_at),
        last_compiled_at=wall_time(row.last_compiled_at),
        changes=tuple(row.changes),
        arguments=tuple(row.arguments),
        jax_explanation=row.jax_explanation,
    )


def _stall(stall: xmon_pb2.StallReport) -> Stall:
    where = stall.step_thread_waits_in
    return Stall(
        stacks=stall.stacks,
        waits_in=where if where in ("jax", "host") else "unknown",
        in_program=stall.step_thread_in_program,
    )


def fleet_identity(
    process: xmon_pb2.ProcessIdentity, before: FleetIdentity | None = None
) -> FleetIdentity:
    """Which process of which job this is; ``before`` where the report repeats it."""
    identity = FleetIdentity(
        job_key=clean_label(process.job_key),
        process_index=max(0, process.process_index),
        process_count=max(1, process.process_count),
        slice_index=_optional(process, "slice_index"),
        worker=clean_text(process.worker),
        distributed=process.distributed,
        job_key_declared=process.job_key_declared,
    )
    return before if identity == before else identity


def _goodput(account: xmon_pb2.GoodputAccount) -> GoodputAccount:
    seconds = account.seconds
    return GoodputAccount(
        process_started_at=wall_time(account.process_started_at),
        as_of=finite(account.as_of),
        # only the buckets are read: looked up, so a map padded with others is never walked
        seconds={
            name: value
            for name in ACCOUNT_BUCKETS
            if name in seconds and math.isfinite(value := seconds[name])
        },
        steps_marked=account.steps_marked,
        first_step_at=wall_time(account.first_step_at),
        last_step_at=wall_time(account.last_step_at),
    )


def program_of(p: xmon_pb2.ProgramInfo) -> Program:
    # every optional field of a program is a number: a float is kept only where finite
    optional: dict[str, Any] = {name: optional_finite(p, name) for name in _PROGRAM_OPTIONAL}
    return Program(
        fingerprint=clean_label(p.fingerprint),
        name=clean_label(p.name),
        fun_name=clean_label(p.fun_name) if p.fun_name else None,
        num_devices=max(1, p.num_devices),
        compiled_at=wall_time(p.compiled_at) or None,
        cache_hit=p.cache_hit,
        in_step=p.in_step,
        program_ids=tuple(p.program_ids[-MAX_PROGRAM_IDS:]),
        flops_lower_bound=p.flops_lower_bound,
        flops_upper_bound=p.flops_upper_bound,
        loops=p.loops,
        loops_unknown_trip_count=p.loops_unknown_trip_count,
        conditionals=conditionals_of(p.conditionals) if p.flops_upper_bound else (),
        **optional,
    )


def conditionals_of(sent: Sequence[xmon_pb2.ConditionalCost]) -> tuple[Conditional, ...]:
    """A program's conditionals as the agent described them, or none at all where one of them
    is past the bounds or holds a number that is not a finite cost: the daemon then leaves the
    program's figures as the upper bound they are."""
    if len(sent) > MAX_CONDITIONALS:
        return ()
    kept = []
    for conditional in sent:
        branches = conditional.branches
        numbers = [conditional.counted_flops, conditional.counted_bytes_accessed]
        numbers += [n for b in branches for n in (b.flops, b.bytes_accessed)]
        if not 2 <= len(branches) <= MAX_BRANCHES or not all(_cost(n) for n in numbers):
            return ()
        if any(len(b.ops) > MAX_BRANCH_OPS for b in branches):
            return ()
        kept.append(
            Conditional(
                name=clean_label(conditional.name),
                branches=tuple(
                    Branch(b.flops, b.bytes_accessed, tuple(clean_label(op) for op in b.ops))
                    for b in branches
                ),
                counted_flops=conditional.counted_flops,
                counted_bytes_accessed=conditional.counted_bytes_accessed,
            )
        )
    return tuple(kept)


def _cost(value: float) -> bool:
    return math.isfinite(value) and value >= 0.0


# -- execution samples and out-of-memory reports ----------------------------------------------


def sample_of(
    message: xmon_pb2.ExecutionSample,
    conditionals: Mapping[int, tuple[Conditional, ...]] | None = None,
) -> ExecutionSample:
    """An execution sample; its step begins are taken up to one past what a sample may hold,
    enough for the reader to refuse it without a copy of all of them. ``conditionals``: the
    job's, by program id, whose branches the reader counts."""
    return ExecutionSample(
        conditionals=conditionals or {},
        started_at=message.started_at,
        duration_seconds=message.duration_seconds,
        xspace=message.xspace,
        step_begin_seconds=tuple(message.step_begin_seconds[: MAX_STEP_BEGINS + 1]),
        steps_marked=message.steps_marked,
        anchor_seconds=_optional(message, "anchor_seconds"),
    )


def oom_of(message: xmon_pb2.OomReport) -> OomReport:
    """An out-of-memory report, scrubbed: the finding's event (arrival and files still to be
    set by the sink, xmon.daemon.oom), the report's JSON and its memory profile."""
    scrub(message)
    record = json_format.MessageToDict(message, preserving_proto_field_name=True)
    record.pop("memory_profile", None)  # in the .prof next to it
    return OomReport(_oom_event(message), record, message.memory_profile)


def _oom_event(report: xmon_pb2.OomReport) -> OomEvent:
    program = None
    if report.HasField("program") and report.program.name:
        p = report.program
        program = ProgramMemory(
            name=p.name,
            source=report.program_source,
            argument_bytes=_optional(p, "argument_bytes"),
            output_bytes=_optional(p, "output_bytes"),
            temp_bytes=_optional(p, "temp_bytes"),
            alias_bytes=_optional(p, "alias_bytes"),
        )
    limits = [s.stats.get("bytes_limit") for s in report.memory]
    return OomEvent(
        wall_time=report.wall_time,
        monotonic=0.0,
        error=report.error,
        seen_by=report.seen_by,
        arrays=tuple(_row(a) for a in report.largest_arrays),
        live_arrays_total=report.live_arrays_total,
        live_bytes_total=report.live_bytes_total,
        program=program,
        failed_allocation_bytes=_optional(report, "failed_allocation_bytes"),
        device_limit_bytes=sum(x for x in limits if x) if limits and all(limits) else None,
        paths=(),
        profile_note=report.memory_profile_note,
    )


def _row(array: xmon_pb2.LiveArray) -> LiveArrayRow:
    return LiveArrayRow(
        shape=tuple(array.shape),
        dtype=array.dtype,
        sharding=array.sharding,
        nbytes=array.nbytes,
        device_bytes=tuple(sorted(array.device_bytes.items())),
    )
