"""Stall, host-bound, memory-leak and setup detectors on synthetic jobs, table-driven."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xmon.analysis.stall import stall_threshold
from xmon.findings.host_bound import detect_host_bound
from xmon.findings.memory import detect_leak, fit
from xmon.findings.setup import detect_setup
from xmon.findings.stall import detect_stall
from xmon.model import (
    AgentHealth,
    Capability,
    CompileStats,
    DeviceInfo,
    DeviceMemory,
    HostSample,
    Job,
    JobDevice,
    LedgerStats,
    ProcessSample,
    Program,
    StepStats,
    Utilization,
)

STACKS = (
    "Thread MainThread (1):\n"
    '  File "/job/train.py", line 9, in <module>\n    step()\n'
    '  File "/usr/lib/python3.11/threading.py", line 327, in wait\n    waiter.acquire()\n\n'
    "Thread xmon-reporter (2):\n"
)


def job(
    busy: tuple[float | None, ...] = (None,),
    platform: str = "cpu",
    limit: int | None = None,
    steps: StepStats | None = None,
    **fields: object,
) -> Job:
    devices = tuple(
        JobDevice(DeviceInfo(i, platform, platform), DeviceMemory(bytes_limit=limit), b)
        for i, b in enumerate(busy)
    )
    stats = steps or StepStats(
        steps_total=100, p50_step_seconds=0.05, p90_step_seconds=0.06, steps_per_second=20.0
    )
    fields.setdefault("ledger", LedgerStats(samples=2))  # where the busy ratios come from
    return Job(
        job_name="j",
        pid=1,
        hostname="h",
        platform=platform,
        jax_version="",
        jaxlib_version="",
        devices=devices,
        steps=stats,
        **fields,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("since_step", "median", "steps", "severity"),
    [
        (5.0, 0.05, 10, None),  # under the 20 s floor
        (25.0, 0.05, 10, "warning"),
        (25.0, 3.0, 10, None),  # 10 x a 3 s median is 30 s
        (25.0, 0.05, 0, None),  # never stepped: not a stall
        (150.0, 0.05, 10, "error"),  # five thresholds
    ],
)
def test_stall(since_step: float, median: float, steps: int, severity: str | None) -> None:
    finding = detect_stall(since_step, median, steps, 1.0, STACKS)
    assert (finding.severity if finding else None) == severity
    if finding is not None:
        assert "threading.py:327 wait" in finding.summary
        assert finding.detail == STACKS and finding.value == since_step


def test_stall_threshold() -> None:
    assert stall_threshold(None) == 20.0 and stall_threshold(4.0) == 40.0


@pytest.mark.parametrize(
    ("busy", "p90", "severity"),
    [
        ((0.9, 0.1), 0.06, None),  # the busiest device is busy
        ((0.3, 0.2), 0.06, "warning"),
        ((0.05, 0.01), 0.06, "warning"),  # a sleep between steps: slow, not broken
        ((0.3,), 0.5, None),  # irregular steps: not every step waits
        ((None,), 0.06, None),  # no ledger sample yet
    ],
)
def test_host_bound(busy: tuple[float | None, ...], p90: float, severity: str | None) -> None:
    stats = StepStats(
        steps_total=100, p50_step_seconds=0.05, p90_step_seconds=p90, steps_per_second=20.0
    )
    finding = detect_host_bound(job(busy, steps=stats), 1.0)
    assert (finding.severity if finding else None) == severity


def test_host_bound_fix_tells_a_busy_process_from_a_waiting_one() -> None:
    busy_cpu = job((0.2,), process=ProcessSample(1.0, 10.0, 1))
    idle = job((0.2,), process=ProcessSample(0.05, 10.0, 1))
    assert "py-spy" in detect_host_bound(busy_cpu, 1.0).fix  # type: ignore[union-attr]
    assert "waits for input" in detect_host_bound(idle, 1.0).fix  # type: ignore[union-attr]


def test_fit() -> None:
    slope, r2 = fit([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)])  # type: ignore[misc]
    assert slope == pytest.approx(2.0) and r2 == pytest.approx(1.0)
    assert fit([(1.0, 1.0), (1.0, 2.0)]) is None


MiB = 1 << 20
HOST = HostSample("h", 2, 0.1, 8 << 30, 4 << 30, 1 << 30)


@pytest.mark.parametrize(
    ("readings", "limit", "severity", "to_oom"),
    [
        (
            [(t * 5.0, 100 * MiB + t * 10 * MiB) for t in range(10)],
            16384 * MiB,
            "warning",
            (16384 - 190) * MiB / (2 * MiB),
        ),
        (
            [(t * 5.0, 100 * MiB + t * 10 * MiB) for t in range(10)],
            300 * MiB,
            "error",
            (300 - 190) * MiB / (2 * MiB),
        ),
        ([(t * 5.0, 100 * MiB + (t % 2) * 10 * MiB) for t in range(10)], 4096 * MiB, None, None),
        ([(t * 1.0, 100 * MiB + t * 10 * MiB) for t in range(10)], 4096 * MiB, None, None),
        ([(t * 5.0, 100 * MiB + t * 10 * MiB) for t in range(5)], 4096 * MiB, None, None),
    ],
)
def test_leak(
    readings: list[tuple[float, float]], limit: int, severity: str | None, to_oom: float | None
) -> None:
    finding = detect_leak(readings, job((None,), platform="gpu", limit=limit), None, 1.0)
    assert (finding.severity if finding else None) == severity
    if finding is not None:
        assert finding.value == pytest.approx(to_oom)


def test_leak_on_cpu_counts_down_host_memory() -> None:
    readings = [(t * 5.0, 100 * MiB + t * 10 * MiB) for t in range(10)]
    finding = detect_leak(readings, job((None,)), HOST, 1.0)
    assert finding is not None and dict(finding.evidence)["host memory available"] == "1.0 GiB"


def kinds(found: list) -> set[str]:  # type: ignore[type-arg]
    return {f.kind for f in found}


def test_setup() -> None:
    no_steps = job(steps=StepStats(), programs=(Program("f", "jit_f"),))
    assert kinds(detect_setup(no_steps, 61.0, 1.0)) == {"no_steps"}
    assert kinds(detect_setup(no_steps, 30.0, 1.0)) == set()
    assert kinds(detect_setup(job(), 100.0, 1.0)) == {"no_peak"}
    peak = Utilization(peak_flops_per_second=1e12)
    assert kinds(detect_setup(job(utilization=peak), 100.0, 1.0)) == {"no_model_flops"}
    (no_hfu,) = detect_setup(job(utilization=peak), 100.0, 1.0)
    assert "HFU is shown" not in no_hfu.summary  # no HFU either: the finding does not claim one
    with_hfu = Utilization(peak_flops_per_second=1e12, hardware_flops_utilization_ratio=0.3)
    (shown,) = detect_setup(job(utilization=with_hfu), 100.0, 1.0)
    assert shown.summary.endswith("(HFU is shown)")
    # a job run with no code change: inferred steps, and it is told why MFU and HFU are absent
    inferred = StepStats(inferred=True, inferred_from="jit_step", steps_per_second=7.6)
    assert kinds(detect_setup(job(steps=inferred), 100.0, 1.0)) == {"no_peak"}
    assert kinds(detect_setup(job(steps=inferred, utilization=peak), 100.0, 1.0)) == {
        "no_model_flops"
    }
    cold = CompileStats(cache_requests_total=30, cache_misses_total=30)
    assert "cache_never_hits" in kinds(detect_setup(job(compile=cold), 100.0, 1.0))
    assert all(f.severity == "info" for f in detect_setup(job(compile=cold), 100.0, 1.0))


def test_an_inferred_step_with_a_program_every_k_of_them_may_be_a_micro_step() -> None:
    """No markers, four micro-steps then an update: the inferred step is the micro-step, and
    the job is told that the update's cycle may be its real step."""
    inferred = StepStats(inferred=True, inferred_from="jit_micro", steps_per_second=40.0)
    micro = Program("m", "jit_micro", executions_per_step=1.0)
    update = Program("u", "jit_update", executions_per_step=0.25)
    found = detect_setup(job(steps=inferred, programs=(micro, update)), 100.0, 1.0)
    (ambiguous,) = [f for f in found if f.kind == "inferred_step_ambiguous"]
    assert ambiguous.severity == "info"
    assert "jit_update runs once every 4 of them" in ambiguous.summary
    assert dict(ambiguous.evidence)["steps inferred from"] == "jit_micro"
    assert "xmon.step()" in ambiguous.fix
    # marked steps, a program at no whole cycle, or one as frequent as the step: nothing
    marked = StepStats(steps_total=100, steps_per_second=10.0)
    irregular = Program("u", "jit_update", executions_per_step=0.3)
    twice = Program("u", "jit_update", executions_per_step=2.0)
    for steps, programs in ((marked, (micro, update)), (inferred, (micro, irregular)),
                            (inferred, (micro, twice))):  # fmt: skip
        found = detect_setup(job(steps=steps, programs=programs), 100.0, 1.0)
        assert "inferred_step_ambiguous" not in kinds(found)


def test_a_job_tracing_itself_throughout_is_told_why_the_ledger_shows_nothing() -> None:
    busy = AgentHealth(ledger_samples_skipped_total=3, ledger_samples_busy_total=3)
    unsampled = LedgerStats(samples=0)
    blocked = job(agent=busy, ledger=unsampled)
    briefly = job(agent=AgentHealth(ledger_samples_busy_total=2), ledger=unsampled)
    assert "ledger_kept_busy" not in kinds(detect_setup(briefly, 120.0, 1.0))  # a short trace
    (finding,) = [f for f in detect_setup(blocked, 30.0, 1.0) if f.kind == "ledger_kept_busy"]
    assert finding.severity == "warning" and "jax.profiler.trace" in finding.fix
    assert "ledger_kept_busy" not in kinds(detect_setup(job(agent=busy), 120, 1))  # it sampled
    assert "ledger_kept_busy" not in kinds(detect_setup(job(ledger=unsampled), 120.0, 1.0))


def test_a_job_whose_numbers_are_still_to_come_is_told_when() -> None:
    """A job of long steps waits minutes for the ledger's numbers: without markers while its
    samples grow to hold whole periods, with markers until the first whole-step sample."""
    growing = job(steps=StepStats(), programs=(Program("f", "jit_f"),),
                  ledger=LedgerStats(samples=2, sample_seconds_asked=16.0),
                  agent=AgentHealth(ledger_next_sample_at=1040.0),
                  last_report_at=1000.0)  # fmt: skip
    (inferring,) = detect_setup(growing, 61.0, 1.0)
    assert inferring.kind == "steps_not_inferred_yet" and inferring.severity == "info"
    assert dict(inferring.evidence) == {
        "sample length asked": "16.0 s", "ledger samples": "2", "next sample": "due in 40 s"
    }  # fmt: skip
    marked = StepStats(steps_total=4, p50_step_seconds=10.0)
    waiting = job(steps=marked, ledger=LedgerStats(samples=0), last_report_at=1000.0,
                  agent=AgentHealth(ledger_next_sample_at=1300.0))  # fmt: skip
    assert "ledger_pending" not in kinds(detect_setup(waiting, 20.0, 1.0))  # too soon
    (pending,) = [f for f in detect_setup(waiting, 40.0, 1.0) if f.kind == "ledger_pending"]
    assert dict(pending.evidence)["next sample"] == "due in 300 s"
    recording = job(steps=marked, ledger=LedgerStats(samples=0), agent=AgentHealth())
    (now,) = [f for f in detect_setup(recording, 40.0, 1.0) if f.kind == "ledger_pending"]
    assert dict(now.evidence)["next sample"] == "recording now"
    sampled = job(steps=marked, ledger=LedgerStats(samples=1))
    assert "ledger_pending" not in kinds(detect_setup(sampled, 40.0, 1.0))
    lost = (Capability("ledger", "gone"),)
    assert "ledger_pending" not in kinds(detect_setup(job(steps=marked, capabilities=lost), 40, 1))


def test_samples_refused_for_their_size_are_said_instead_of_pending() -> None:
    """Samples came and were too large to read: the finding says so, with the length asked,
    not that the first sample is still to come; it goes once one is read."""
    marked = StepStats(steps_total=40, p50_step_seconds=0.01)
    refused = LedgerStats(samples=0, sample_seconds_most=0.05, samples_dropped_total=3)
    found = detect_setup(job(steps=marked, ledger=refused, agent=AgentHealth()), 40.0, 1.0)
    (large,) = [f for f in found if f.kind == "samples_too_large"]
    assert "ledger_pending" not in kinds(found)
    assert dict(large.evidence)["longest sample asked"] == "0.05 s"
    assert dict(large.evidence)["samples dropped"] == "3"
    assert "131,072" in large.fix
    read = replace(refused, samples=1)
    assert "samples_too_large" not in kinds(detect_setup(job(steps=marked, ledger=read), 40, 1))


def test_a_capability_unavailable_is_a_warning_that_names_it_and_its_reason() -> None:
    available = (Capability("ledger"), Capability("catalogue"))
    assert "capability_unavailable" not in kinds(detect_setup(job(capabilities=available), 9, 1))
    lost = (Capability("ledger", "jax._src.profiler._profile_state not found"),
            Capability("catalogue"), Capability("loop_cost", "no HLO text parser"))  # fmt: skip
    (finding,) = [f for f in detect_setup(job(capabilities=lost), 9.0, 1.0)
                  if f.kind == "capability_unavailable"]  # fmt: skip
    assert finding.severity == "warning" and finding.subject == "ledger, loop_cost"
    assert dict(finding.evidence) == {
        "ledger": "jax._src.profiler._profile_state not found",
        "loop_cost": "no HLO text parser",
    }
    assert "FLOPs per step" in finding.fix and "jax 0.10 to 0.12" in finding.fix
