"""What the daemon knows about each attached job, and how it becomes a ``model.Job``.

Agents send cumulative counters plus what is new since their last report; this module keeps
the per-job state between reports and turns it into the snapshot model, computing the derived
numbers (step percentiles, MFU, bandwidth utilisation, fragmentation) with xmon.derived.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message

from xmon import derived
from xmon.daemon.bounds import DEVICE_BYTES, JOB_BASE_BYTES, PROGRAM_BYTES, StateBudget
from xmon.execution import rates
from xmon.execution.ledger import JobLedger, LedgerRates
from xmon.model import (
    AgentHealth,
    CompileEvent,
    CompileStats,
    DeviceInfo,
    DeviceMemory,
    FleetIdentity,
    Job,
    JobDevice,
    LedgerStats,
    ProcessSample,
    Program,
    StepStats,
    Utilization,
)
from xmon.peaks import PeakTable
from xmon.proto import xmon_pb2
from xmon.wire import fields_of, optional_field_names

_Message = TypeVar("_Message", bound=Message)

STEP_WINDOW = 256  # step durations kept for percentiles
THROUGHPUT_WINDOW = 64  # most recent steps used for steps/s
RECENT_COMPILES = 32
MAX_PROGRAM_IDS = 64  # module ids kept per program (agents send at most 16)
MAX_LABEL_CHARS = 128

_MEMORY_KEYS = frozenset((
    "bytes_in_use", "peak_bytes_in_use", "bytes_limit", "bytes_reserved",
    "peak_bytes_reserved", "bytes_reservable_limit", "largest_free_block_bytes",
    "largest_alloc_size", "num_allocs", "pool_bytes", "peak_pool_bytes",
))  # fmt: skip
_PROGRAM_OPTIONAL = optional_field_names(xmon_pb2.ProgramInfo)


def clean_label(value: str) -> str:
    """Client-supplied names become label values and paths: bound them, drop control chars."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in value)
    return cleaned[:MAX_LABEL_CHARS] or "unnamed"


def _clean_text(value: str) -> str:
    """``clean_label`` for a field where empty means unknown (kept empty)."""
    return clean_label(value) if value else ""


@dataclass
class JobState:
    hello: xmon_pb2.AgentHello
    connected_at: float
    last_report_at: float = 0.0
    last_report_monotonic: float = 0.0
    report: xmon_pb2.AgentReport | None = None
    devices: dict[int, DeviceInfo] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)
    steps_window: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))
    compile_events: deque[CompileEvent] = field(
        default_factory=lambda: deque(maxlen=RECENT_COMPILES)
    )
    steps_changed_monotonic: float = 0.0
    platform: str = ""
    ledger: JobLedger = field(default_factory=JobLedger)
    budget: StateBudget = field(default_factory=StateBudget)  # shared by the daemon's jobs
    held_bytes: int = 0  # estimated bytes this job's state holds (see xmon.daemon.bounds)
    _programs_sorted: tuple[Program, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Agents announce their devices once per stream (in the hello, or in the first report
        # after the job initialised its backend), not in every report.
        self._add_devices(self.hello.devices)
        self.platform = _clean_text(self.hello.platform)
        _ = self.identity  # cleaned once, before the hello is cut to what is read later
        self.hello = _slim_hello(self.hello)
        self._account(JOB_BASE_BYTES + self.hello.ByteSize())

    def release(self) -> None:
        """The job has gone: its bytes no longer count against the daemon's total."""
        self.budget.in_use -= self.held_bytes
        self.held_bytes = 0

    def _account(self, added: int) -> None:
        self.held_bytes += added
        self.budget.in_use += added

    def _add_devices(self, devices: Iterable[xmon_pb2.DeviceInfo]) -> None:
        limit = self.budget.limits.devices_per_job
        for info in devices:
            if info.id in self.devices:
                continue
            if len(self.devices) >= limit:
                self.budget.refuse("devices")
            elif self.budget.room(self.held_bytes) < DEVICE_BYTES:
                self.budget.refuse(self.budget.bound_hit(self.held_bytes))
            else:
                self.devices[info.id] = device_info_from_proto(info)
                self._account(DEVICE_BYTES)

    def _add_programs(self, programs: Iterable[xmon_pb2.ProgramInfo]) -> None:
        limit = self.budget.limits.programs_per_job
        for program in programs:
            known = program.fingerprint in self.programs
            if not known and len(self.programs) >= limit:
                self.budget.refuse("programs")
            elif not known and self.budget.room(self.held_bytes) < PROGRAM_BYTES:
                self.budget.refuse(self.budget.bound_hit(self.held_bytes))
            else:
                self.programs[program.fingerprint] = program_from_proto(program)
                self._programs_sorted = None
                if not known:
                    self._account(PROGRAM_BYTES)

    @property
    def pid(self) -> int:
        return int(self.hello.pid)

    @functools.cached_property
    def job_name(self) -> str:
        return clean_label(self.hello.job_name)

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """The Job fields the hello fixes for the stream's life, cleaned once."""
        hello = self.hello
        return {
            "job_name": self.job_name,
            "pid": self.pid,
            "hostname": clean_label(hello.hostname),
            "jax_version": clean_label(hello.jax_version),
            "jaxlib_version": clean_label(hello.jaxlib_version),
            "process_index": hello.process_index,
            "process_count": max(1, hello.process_count),
            "argv": tuple(clean_label(a) for a in hello.argv[:32]),
            "started_at": hello.started_at,
        }

    def sorted_programs(self) -> tuple[Program, ...]:
        """Programs in compile order; re-sorted only after a report changed them."""
        if self._programs_sorted is None:
            ordered = sorted(self.programs.values(), key=lambda p: p.compiled_at or 0.0)
            self._programs_sorted = tuple(ordered)
        return self._programs_sorted

    def apply(self, report: xmon_pb2.AgentReport, now_wall: float, now_monotonic: float) -> None:
        previous_steps = self.report.steps.steps_total if self.report is not None else 0
        # Only the parts read later are kept, without unknown fields: the message itself (up to
        # max_message_bytes, padding included) is let go as soon as this returns.
        slim = _slim_report(report, self.budget)
        kept_before = self.report.ByteSize() if self.report is not None else 0
        self.report = slim
        self._account(slim.ByteSize() - kept_before)
        self.last_report_at = now_wall
        self.last_report_monotonic = now_monotonic
        if report.platform:
            self.platform = clean_label(report.platform)
        if len(report.devices) != len(self.devices) or any(
            info.id not in self.devices for info in report.devices
        ):  # a job's devices do not change once known: convert them only once
            self._add_devices(report.devices)
        if report.steps.steps_total != previous_steps or not self.steps_changed_monotonic:
            self.steps_changed_monotonic = now_monotonic
        self.steps_window.extend(report.steps.recent_step_seconds[-STEP_WINDOW:])
        for event in report.compile_events[-RECENT_COMPILES:]:
            self.compile_events.append(
                CompileEvent(
                    fun_name=clean_label(event.fun_name),
                    duration_seconds=event.duration_seconds,
                    wall_time=event.wall_time,
                    cache_hit=event.cache_hit,
                )
            )
        self._add_programs(report.programs)


def _slim_hello(hello: xmon_pb2.AgentHello) -> xmon_pb2.AgentHello:
    """The hello without its devices (converted already), argv past what is shown, and
    unknown fields (dropped from ``hello`` itself too: it is the received message, let go
    once the job holds this copy)."""
    hello.DiscardUnknownFields()
    slim = xmon_pb2.AgentHello()
    slim.CopyFrom(hello)
    slim.ClearField("devices")
    del slim.argv[32:]
    return _compact(slim)


def _compact(message: _Message) -> _Message:
    """A copy of ``message`` holding only what it serializes to, in memory of its own.

    protobuf's Python runtime (upb) keeps a message's contents in an arena that is freed only
    with the whole message: ``ClearField``, ``del`` and ``DiscardUnknownFields`` leave the bytes
    in it, and ``CopyFrom`` copies unknown fields too. A hello padded with 15 MiB of unknown
    fields kept all 15 MiB in its slim copy until the stream ended. Parsing the cut-down
    message again gives an arena of just what the job keeps."""
    return type(message).FromString(message.SerializeToString())


def _slim_report(report: xmon_pb2.AgentReport, budget: StateBudget) -> xmon_pb2.AgentReport:
    """The parts of a report the snapshot reads later: counters and each device's memory
    (at most ``devices_per_job`` samples of ``stats_per_device`` stats). Unknown fields are
    dropped from ``report`` first, so that no copy below takes them along (see ``_compact``)."""
    report.DiscardUnknownFields()
    slim = xmon_pb2.AgentReport(seq=report.seq, wall_time=report.wall_time)
    slim.steps.CopyFrom(report.steps)
    del slim.steps.recent_step_seconds[:]  # already in the job's step window
    slim.compile.CopyFrom(report.compile)
    slim.agent.CopyFrom(report.agent)
    # read by the findings (xmon.findings.tracker); the agent bounds both (16 rows, 64 KiB)
    slim.compile_functions.extend(report.compile_functions[:16])
    if report.HasField("stall"):
        slim.stall.CopyFrom(report.stall)
    if report.HasField("process"):
        slim.process.CopyFrom(report.process)
    limits = budget.limits
    budget.refuse("devices", len(report.memory) - limits.devices_per_job)
    for sample in report.memory[: limits.devices_per_job]:
        kept = slim.memory.add(device_id=sample.device_id)
        if sample.HasField("live_array_bytes"):
            kept.live_array_bytes = sample.live_array_bytes
        stats = {key: value for key, value in sample.stats.items() if len(key) <= MAX_LABEL_CHARS}
        if len(stats) > limits.stats_per_device:
            budget.refuse("memory_stats", len(stats) - limits.stats_per_device)
            stats = dict(sorted(stats.items())[: limits.stats_per_device])
        kept.stats.update(stats)
    return _compact(slim)


def device_info_from_proto(info: xmon_pb2.DeviceInfo) -> DeviceInfo:
    return DeviceInfo(
        id=info.id,
        platform=_clean_text(info.platform),
        device_kind=clean_label(info.device_kind),
        process_index=info.process_index,
        local_hardware_id=info.local_hardware_id if info.HasField("local_hardware_id") else None,
        coords=tuple(info.coords) or None,
        core_on_chip=info.core_on_chip if info.HasField("core_on_chip") else None,
        slice_index=info.slice_index if info.HasField("slice_index") else None,
    )


def program_from_proto(p: xmon_pb2.ProgramInfo) -> Program:
    optional = {name: getattr(p, name) if p.HasField(name) else None for name in _PROGRAM_OPTIONAL}
    return Program(
        fingerprint=clean_label(p.fingerprint),
        name=clean_label(p.name),
        fun_name=clean_label(p.fun_name) if p.fun_name else None,
        num_devices=max(1, p.num_devices),
        compiled_at=p.compiled_at or None,
        cache_hit=p.cache_hit,
        in_step=p.in_step,
        program_ids=tuple(p.program_ids[-MAX_PROGRAM_IDS:]),
        flops_lower_bound=p.flops_lower_bound,
        loops=p.loops,
        loops_unknown_trip_count=p.loops_unknown_trip_count,
        **optional,
    )


def device_memory(sample: xmon_pb2.DeviceMemorySample) -> DeviceMemory:
    known: dict[str, int] = {}
    stats: dict[str, int] = {}  # keys this daemon does not know yet: kept as they came
    for key, value in sample.stats.items():  # one pass: protobuf maps are slow to look up
        (known if key in _MEMORY_KEYS else stats)[key] = value
    fragmentation = derived.fragmentation_ratio(
        known.get("bytes_limit"), known.get("bytes_in_use"), known.get("largest_free_block_bytes")
    )
    return DeviceMemory(
        live_array_bytes=sample.live_array_bytes if sample.HasField("live_array_bytes") else None,
        extra=stats,
        fragmentation_ratio=fragmentation,
        **known,
    )


class JobBuilder:
    """Turns a JobState into the snapshot's Job with every derived number filled in."""

    def __init__(self, peaks: PeakTable, clock: Callable[[], float] = time.monotonic) -> None:
        self._peaks = peaks
        self._clock = clock

    def build(self, state: JobState, process: ProcessSample | None) -> Job:
        hello, report = state.hello, state.report
        counters = report.steps if report else xmon_pb2.StepCounters()
        ledger = state.ledger.rates()
        marked_rate = self._marked_rate(state) if counters.steps_total else None
        step_rate = marked_rate if counters.steps_total else ledger.steps_per_second
        programs = tuple(rates.with_ledger(p, ledger, step_rate) for p in state.sorted_programs())
        devices, busy, collective = self._devices(state, ledger)
        work = rates.executed_work(programs)
        steps = self._steps(state, counters, programs, step_rate, work, report)
        fleet = fleet_identity(report.process) if report and report.HasField("process") else None
        identity = state.identity
        if fleet is not None:  # the hello may precede jax.distributed: the report is final
            identity = {
                **identity,
                "process_index": fleet.process_index,
                "process_count": fleet.process_count,
            }
        return Job(
            **identity,
            fleet=fleet,
            step_breakdown=rates.step_breakdown(busy, collective, steps.steps_per_second),
            platform=state.platform or hello.platform or "unknown",
            last_report_at=state.last_report_at,
            devices=devices,
            compile=_compile_stats(report, tuple(state.compile_events)),
            programs=programs,
            steps=steps,
            utilization=self._utilization(steps, devices, work),
            process=process,
            agent=_agent_health(report),
            ledger=_ledger_stats(state.ledger, ledger, programs),
        )

    def _marked_rate(self, state: JobState) -> float | None:
        """Steps/s over the latest marked steps; 0 once the job has stopped stepping."""
        window = tuple(state.steps_window)
        rate = derived.steps_per_second(window[-THROUGHPUT_WINDOW:])
        p50 = derived.percentile(window, 50)
        if rate is not None and p50 is not None:
            idle = self._clock() - state.steps_changed_monotonic
            if idle > 5.0 + 10 * p50:
                return 0.0  # the job stopped stepping: no throughput, not "unknown"
        return rate

    def _devices(
        self, state: JobState, ledger: LedgerRates
    ) -> tuple[tuple[JobDevice, ...], dict[int, float], dict[int, float]]:
        """The job's devices, and each one's median busy and collective ratios (empty
        before a ledger sample)."""
        samples = {s.device_id: s for s in state.report.memory} if state.report else {}
        busy: dict[int, float] = {}
        steady_busy: dict[int, float] = {}
        collective: dict[int, float] = {}
        if ledger.samples:
            ordinals = {
                i: info.local_hardware_id
                for i, info in state.devices.items()
                if info.local_hardware_id is not None
            }
            busy = rates.busy_by_device(ledger.busy_ratio, list(state.devices), ordinals)
            steady_busy = rates.busy_by_device(
                ledger.busy_ratio_median, list(state.devices), ordinals
            )
            collective = rates.busy_by_device(
                ledger.collective_ratio_median, list(state.devices), ordinals
            )
        devices = tuple(
            JobDevice(
                info=info,
                memory=device_memory(samples[device_id])
                if device_id in samples
                else DeviceMemory(),
                busy_ratio=busy.get(device_id),
            )
            for device_id, info in sorted(state.devices.items())
        )
        return devices, steady_busy, collective

    def _steps(
        self,
        state: JobState,
        counters: xmon_pb2.StepCounters,
        programs: tuple[Program, ...],
        rate: float | None,
        work: rates.ExecutedWork,
        report: xmon_pb2.AgentReport | None,
    ) -> StepStats:
        window = tuple(state.steps_window)
        inferred_from = None
        if not counters.steps_total and rate:
            # No markers: the program that used the most device time stands for the step.
            stand_in = rates.step_program(programs)
            inferred_from = stand_in.name if stand_in is not None else None
        declared_bytes = _declared(counters, "bytes_per_step")
        return StepStats(
            steps_total=counters.steps_total,
            step_seconds_total=counters.step_seconds_total,
            last_step_seconds=window[-1] if window else None,
            p50_step_seconds=(1.0 / rate if rate else None)
            if inferred_from
            else derived.percentile(window, 50),
            p90_step_seconds=derived.percentile(window, 90),
            p99_step_seconds=derived.percentile(window, 99),
            steps_per_second=rate if counters.steps_total or inferred_from else None,
            flops_per_step=work.flops_per_step,
            bytes_per_step=declared_bytes if declared_bytes is not None else work.bytes_per_step,
            model_flops_per_step=_declared(counters, "flops_per_step"),
            tokens_per_step=_declared(counters, "tokens_per_step"),
            window=window[-THROUGHPUT_WINDOW:],
            inferred=inferred_from is not None,
            inferred_from=inferred_from,
            steps_begun_total=max(counters.steps_begun_total, counters.steps_total),
            open_step_seconds=_declared(counters, "open_step_seconds"),
            stall_waits_in=_stall_waits_in(report),
        )

    def _utilization(
        self, steps: StepStats, devices: tuple[JobDevice, ...], work: rates.ExecutedWork
    ) -> Utilization:
        peaks = [self._peaks.lookup(d.info.device_kind) for d in devices]
        peak_flops = derived.sum_known(p.flops_per_second if p else None for p in peaks)
        peak_bytes = derived.sum_known(p.memory_bytes_per_second if p else None for p in peaks)
        if not devices:
            peak_flops = peak_bytes = None
        flops_rate = derived.achieved_rate(steps.flops_per_step, steps.steps_per_second)
        bytes_rate = derived.achieved_rate(steps.bytes_per_step, steps.steps_per_second)
        model_rate = derived.achieved_rate(steps.model_flops_per_step, steps.steps_per_second)
        return Utilization(
            achieved_flops_per_second=flops_rate,
            achieved_bytes_per_second=bytes_rate,
            achieved_model_flops_per_second=model_rate,
            peak_flops_per_second=peak_flops,
            peak_bytes_per_second=peak_bytes,
            model_flops_utilization_ratio=derived.utilization_ratio(model_rate, peak_flops),
            hardware_flops_utilization_ratio=derived.utilization_ratio(flops_rate, peak_flops),
            memory_bandwidth_utilization_ratio=derived.utilization_ratio(bytes_rate, peak_bytes),
            flops_lower_bound=work.lower_bound,
            tokens_per_second=derived.achieved_rate(steps.tokens_per_step, steps.steps_per_second),
        )


def _stall_waits_in(report: xmon_pb2.AgentReport | None) -> str | None:
    if report is None or not report.HasField("stall"):
        return None
    where = report.stall.step_thread_waits_in
    return where if where in ("jax", "host") else "unknown"


def fleet_identity(process: xmon_pb2.ProcessIdentity) -> FleetIdentity:
    return FleetIdentity(
        job_key=clean_label(process.job_key),
        process_index=max(0, process.process_index),
        process_count=max(1, process.process_count),
        slice_index=process.slice_index if process.HasField("slice_index") else None,
        worker=_clean_text(process.worker),
        distributed=process.distributed,
        job_key_declared=process.job_key_declared,
    )


def _declared(counters: xmon_pb2.StepCounters, name: str) -> float | None:
    return getattr(counters, name) if counters.HasField(name) else None


def _ledger_stats(
    ledger: JobLedger, rates_now: LedgerRates, programs: tuple[Program, ...]
) -> LedgerStats:
    seen, seen_at = ledger.last_seen or (None, None)
    name = next((p.name for p in programs if seen in p.program_ids), None)
    return LedgerStats(
        last_program=name if name is not None or seen is None else f"program id {seen}",
        last_program_seen_at=seen_at,
        samples=rates_now.samples,
        sampled_seconds=rates_now.sampled_seconds,
        window_seconds=rates_now.window_seconds,
        last_sample_at=rates_now.last_sample_at,
        parse_errors_total=ledger.parse_errors_total,
        samples_dropped_total=ledger.samples_dropped_total,
    )


def _compile_stats(
    report: xmon_pb2.AgentReport | None, recent: tuple[CompileEvent, ...]
) -> CompileStats:
    if report is None:
        return CompileStats(recent=recent)
    return CompileStats(**fields_of(report.compile, xmon_pb2.CompileCounters), recent=recent)


def _agent_health(report: xmon_pb2.AgentReport | None) -> AgentHealth:
    if report is None:
        return AgentHealth()
    return AgentHealth(**fields_of(report.agent, xmon_pb2.AgentCounters))
