"""How a job's state (xmon.daemon.jobs) becomes the snapshot's ``model.Job``, with every
derived number filled in: step percentiles and rates, executed work from the execution ledger,
MFU, HFU, bandwidth utilisation, the step's breakdown and the job's fleet identity.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

from xmon.analysis import derived
from xmon.analysis.peaks import PeakTable
from xmon.daemon.jobs import JobState
from xmon.daemon.received import NO_STEPS, MemoryReading, ReportParts, StepCounters
from xmon.execution import rates
from xmon.execution.ledger import JobLedger, LedgerRates
from xmon.findings.tracker import NO_EVIDENCE, AgentEvidence
from xmon.goodput.restarts import RestartMemory
from xmon.model import (
    AgentHealth,
    CompileEvent,
    CompileStats,
    DeviceMemory,
    Goodput,
    Job,
    JobDevice,
    LedgerStats,
    ProcessSample,
    Program,
    StepStats,
    Utilization,
)

THROUGHPUT_WINDOW = 64  # most recent steps used for steps/s
_MEMORY_KEYS = frozenset((
    "bytes_in_use", "peak_bytes_in_use", "bytes_limit", "bytes_reserved",
    "peak_bytes_reserved", "bytes_reservable_limit", "largest_free_block_bytes",
    "largest_alloc_size", "num_allocs", "pool_bytes", "peak_pool_bytes",
))  # fmt: skip


class JobBuilder:
    """Turns a JobState into the snapshot's Job with every derived number filled in."""

    def __init__(
        self,
        peaks: PeakTable,
        clock: Callable[[], float] = time.monotonic,
        restarts: RestartMemory | None = None,
    ) -> None:
        self._peaks = peaks
        self._clock = clock
        # processes of job keys that ended (an empty memory is falsy: no "or" here)
        self._restarts = RestartMemory() if restarts is None else restarts
        # id(JobState) -> ((sorted programs, ledger rates, step rate), programs built from them)
        self._built: dict[int, tuple[tuple[object, ...], tuple[Program, ...]]] = {}

    def build(self, state: JobState, process: ProcessSample | None) -> Job:
        report = state.report
        counters = report.steps if report is not None else NO_STEPS
        ledger = state.ledger.rates()
        marked_rate = self._marked_rate(state) if counters.steps_total else None
        step_rate = marked_rate if counters.steps_total else ledger.steps_per_second
        programs = self._programs(state, ledger, step_rate)
        devices, busy, collective = self._devices(state, ledger)
        work = rates.executed_work(programs)
        steps = self._steps(state, counters, programs, step_rate, work, report)
        fleet = report.fleet if report is not None else None
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
            goodput=self._goodput(state),
            platform=state.platform or "unknown",
            last_report_at=state.last_report_at,
            devices=devices,
            compile=_compile_stats(report, tuple(state.compile_events)),
            programs=programs,
            steps=steps,
            utilization=self._utilization(steps, devices, work),
            process=process,
            agent=report.agent if report is not None else AgentHealth(),
            ledger=_ledger_stats(state.ledger, ledger, programs),
            capabilities=report.capabilities if report is not None else (),
        )

    def _programs(
        self, state: JobState, ledger: LedgerRates, step_rate: float | None
    ) -> tuple[Program, ...]:
        """The job's programs with their executions in the ledger; the same objects as last
        time while neither the programs, the ledger's rates nor the step rate changed, so that
        views and exporters can reuse what they made of them."""
        ordered = state.sorted_programs()
        if ledger.samples == 0:  # with_ledger leaves every program as it is
            return ordered
        key = (ordered, ledger, step_rate)
        last = self._built.get(id(state))
        if last is not None and all(a is b or a == b for a, b in zip(last[0], key, strict=True)):
            return last[1]
        extra = rates.unclaimed_ids(ordered, ledger)
        programs = tuple(
            rates.with_ledger(p, ledger, step_rate, extra.get(p.fingerprint, ())) for p in ordered
        )
        self._built[id(state)] = (key, programs)
        return programs

    def _goodput(self, state: JobState) -> Goodput | None:
        """The job's wall-time account with its stepping split by the busy ratio, over its
        life's stepping, of the devices the step uses; and what its restart cost. None from an
        agent that sends no account."""
        account = state.report.goodput if state.report is not None else None
        if account is None:
            return None
        seconds = dict(account.seconds)
        goodput = state.goodput.update(
            seconds,
            wall_seconds=max(0.0, account.as_of - account.process_started_at),
            as_of=account.as_of,
            busy_ratio=self._stepping_busy_share(state, seconds.get("steps", 0.0)),
            steps_marked=account.steps_marked,
        )
        key = state.restart_key()
        lost = self._restarts.lost(key, account.first_step_at) if key is not None else None
        return goodput if lost is None else dataclasses.replace(goodput, restart_seconds=lost)

    def _stepping_busy_share(self, state: JobState, stepping_seconds: float) -> float | None:
        """The devices' busy share of the job's stepping over its life, on the devices the
        step uses: for marked steps, their busy seconds per step in the whole steps samples
        held, times the steps (the profiler slows the host side inside samples, not the
        devices' work); without markers, their busy share in samples taken through the
        stepping. None before such a sample."""
        devices, ordinals = list(state.devices), _ordinals(state)
        report = state.report
        steps = report.steps.steps_total if report is not None else 0
        per_step = state.ledger.stepping_device_seconds_per_step()
        if per_step and steps:
            by_device = rates.busy_by_device(per_step, devices, ordinals)
            return rates.marked_step_busy_share(by_device, steps, stepping_seconds)
        stepping = state.ledger.stepping_busy_ratio()  # empty before a sample stepped through
        busy = rates.busy_by_device(stepping, devices, ordinals) if stepping else {}
        return rates.step_busy_ratio(busy)

    def forget(self, live: Iterable[JobState]) -> None:
        """Drop what was kept for jobs that are gone."""
        ids = {id(state) for state in live}
        for gone in [i for i in self._built if i not in ids]:
            del self._built[gone]

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
        readings = state.report.memory if state.report is not None else {}
        busy: dict[int, float] = {}
        steady_busy: dict[int, float] = {}
        collective: dict[int, float] = {}
        if ledger.samples:
            ordinals = _ordinals(state)
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
                memory=device_memory(readings[device_id])
                if device_id in readings
                else DeviceMemory(),
                busy_ratio=busy.get(device_id),
            )
            for device_id, info in sorted(state.devices.items())
        )
        return devices, steady_busy, collective

    def _steps(
        self,
        state: JobState,
        counters: StepCounters,
        programs: tuple[Program, ...],
        rate: float | None,
        work: rates.ExecutedWork,
        report: ReportParts | None,
    ) -> StepStats:
        window = tuple(state.steps_window)
        inferred_from = None
        if not counters.steps_total and rate:
            # No markers: the program that used the most device time stands for the step.
            stand_in = rates.step_program(programs)
            inferred_from = stand_in.name if stand_in is not None else None
        declared_bytes = counters.bytes_per_step
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
            model_flops_per_step=counters.flops_per_step,
            tokens_per_step=counters.tokens_per_step,
            window=window[-THROUGHPUT_WINDOW:],
            inferred=inferred_from is not None,
            inferred_from=inferred_from,
            steps_begun_total=max(counters.steps_begun_total, counters.steps_total),
            open_step_seconds=counters.open_step_seconds,
            stall_waits_in=report.stall.waits_in if report and report.stall else None,
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
            flops_upper_bound=work.upper_bound,
            tokens_per_second=derived.achieved_rate(steps.tokens_per_step, steps.steps_per_second),
        )


def agent_evidence(report: ReportParts | None) -> AgentEvidence:
    """What the findings read of a job's latest report beside its Job (xmon.findings.tracker)."""
    if report is None:
        return NO_EVIDENCE
    stall = report.stall
    return AgentEvidence(
        functions=report.functions,
        stall_stacks=stall.stacks if stall is not None else "",
        step_thread_in_program=stall.in_program if stall is not None else "",
    )


def device_memory(reading: MemoryReading) -> DeviceMemory:
    """The snapshot's allocator stats of one device from its latest reading."""
    known: dict[str, int] = {}
    stats: dict[str, int] = {}  # keys this daemon does not know yet: kept as they came
    for key, value in reading.stats.items():
        (known if key in _MEMORY_KEYS else stats)[key] = value
    fragmentation = derived.fragmentation_ratio(
        known.get("bytes_limit"), known.get("bytes_in_use"), known.get("largest_free_block_bytes")
    )
    return DeviceMemory(
        live_array_bytes=reading.live_array_bytes,
        live_array_read_at=reading.live_array_read_at,
        extra=stats,
        fragmentation_ratio=fragmentation,
        **known,
    )


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
        sample_seconds_asked=ledger.sample_seconds_asked,
        sample_seconds_most=ledger.sample_seconds_most,
    )


def _ordinals(state: JobState) -> dict[int, int]:
    """Device id -> the ordinal the ledger's samples name it by, where the job said."""
    return {
        i: info.local_hardware_id
        for i, info in state.devices.items()
        if info.local_hardware_id is not None
    }


def _compile_stats(report: ReportParts | None, recent: tuple[CompileEvent, ...]) -> CompileStats:
    if report is None:
        return CompileStats(recent=recent)
    return dataclasses.replace(report.compile, recent=recent) if recent else report.compile
