"""The daemon's tracker: findings wait for steady state, keep their first-seen time, and a
stall counts from when the daemon first saw the job (a restart is not a stall)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xmon.findings.recompiles import FunctionCompiles
from xmon.findings.tracker import AgentEvidence, FindingsTracker
from xmon.model import (
    CompileStats,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    LedgerStats,
    StepStats,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def job(steps: int, busy: float = 0.1, compiles: int = 1) -> Job:
    device = JobDevice(DeviceInfo(0, "cpu", "cpu"), DeviceMemory(), busy)
    stats = StepStats(
        steps_total=steps, p50_step_seconds=0.05, p90_step_seconds=0.05, steps_per_second=20.0
    )
    return Job(
        job_name="j",
        pid=7,
        hostname="h",
        platform="cpu",
        jax_version="",
        jaxlib_version="",
        devices=(device,),
        steps=stats,
        compile=CompileStats(compiles_total=compiles),
        ledger=LedgerStats(samples=2),  # where the busy ratio comes from
    )


def kinds(jobs: tuple[Job, ...]) -> list[str]:
    return [f.kind for f in jobs[0].findings if f.severity != "info"]


def test_host_bound_waits_for_steady_state_and_keeps_its_since() -> None:
    clock = Clock()
    tracker = FindingsTracker(clock, wall=clock)
    assert kinds(tracker.annotate((job(500),), {}, None)) == []  # steps seen before: not ours
    clock.now += 1
    assert kinds(tracker.annotate((job(505),), {}, None)) == []  # 5 steps seen
    clock.now += 1
    first = tracker.annotate((job(520),), {}, None)
    assert kinds(first) == ["host_bound"]
    clock.now += 1
    later = tracker.annotate((job(540),), {}, None)
    assert later[0].findings[0].since == first[0].findings[0].since
    clock.now += 1  # a compile: quiet for a while
    assert kinds(tracker.annotate((job(560, compiles=2),), {}, None)) == []


def test_stall_counts_from_first_sight_and_carries_the_stacks() -> None:
    clock = Clock()
    tracker = FindingsTracker(clock, wall=clock)
    evidence = AgentEvidence(stall_stacks="Thread MainThread (1):\n")
    assert "stall" not in kinds(tracker.annotate((job(50, busy=0.9),), {7: evidence}, None))
    clock.now += 25
    (stalled,) = tracker.annotate((job(50, busy=0.9),), {7: evidence}, None)
    assert [f.kind for f in stalled.findings][:1] == ["stall"]
    assert stalled.findings[0].detail.startswith("Thread MainThread")


def test_recompiled_functions_come_from_the_agents_evidence() -> None:
    function = FunctionCompiles("jit_step", 9, 8, changes=("shape: arg 0",))
    evidence = AgentEvidence(functions=(function,))
    (annotated,) = FindingsTracker().annotate((job(5, busy=0.9),), {7: evidence}, None)
    assert [(f.kind, f.subject) for f in annotated.findings][0] == ("recompile", "jit_step")


def test_gone_jobs_are_forgotten() -> None:
    tracker = FindingsTracker()
    tracker.annotate((job(5),), {}, None)
    tracker.annotate((replace(job(5), pid=8),), {}, None)
    assert list(tracker._jobs) == [8]


def test_a_paced_cpu_reading_is_placed_when_it_was_read_and_counted_once() -> None:
    """On CPU the live arrays are counted at rest and paced (here every 20 s, as a job whose
    arrays take long to walk) while reports come every second: each report carries the last
    reading and when it was read. The leak's growth and time to out of memory follow the
    readings, not the reports that repeat them."""
    from xmon.model import HostSample

    mib, growth, pace = 1 << 20, 10 * (1 << 20), 20.0  # 10 MiB a second, read every 20 s
    clock = Clock()
    start = clock.now
    tracker = FindingsTracker(clock, wall=clock)
    host = HostSample("h", 2, 0.1, 64 << 30, 8 << 30, 2 << 30)
    found = None
    for second in range(1, 181):
        clock.now = start + second
        read_at = start + (second // pace) * pace
        used = 1000 * mib + growth * (read_at - start)
        memory = DeviceMemory(live_array_bytes=int(used), live_array_read_at=read_at)
        device = JobDevice(DeviceInfo(0, "cpu", "cpu"), memory, 0.9)
        (annotated,) = tracker.annotate((replace(job(10 * second), devices=(device,)),), {}, host)
        found = next((f for f in annotated.findings if f.kind == "memory_leak"), found)
    assert found is not None and found.value is not None
    last = 1000 * mib + growth * 180
    limit = host.memory_available_bytes + last
    assert found.value == pytest.approx((limit - last) / growth, rel=0.02)
    assert dict(found.evidence)["window"] == "10 readings over 180 s"  # one per reading


def test_a_leak_the_device_readings_miss_is_found_in_the_resident_memory() -> None:
    """A job keeping a copy of its params every step: its live arrays take ever longer to walk,
    so the device reading stays where it was (1 GB) while the process grows 50 MiB a second.
    The process's resident memory at the same step boundaries shows it, within a minute."""
    from xmon.model import HostSample, ProcessSample

    mib, growth = 1 << 20, 50 * (1 << 20)
    clock = Clock()
    start = clock.now
    tracker = FindingsTracker(clock, wall=clock)
    host = HostSample("h", 2, 0.1, 64 << 30, 32 << 30, 2 << 30)
    memory = DeviceMemory(live_array_bytes=1000 * mib, live_array_read_at=start)
    device = JobDevice(DeviceInfo(0, "cpu", "cpu"), memory, 0.9)
    found, found_at = None, None
    for second in range(1, 61):
        clock.now = start + second
        resident = 3300 * mib + growth * second
        process = ProcessSample(1.0, float(second), resident)
        stepping = replace(job(10 * second), devices=(device,), process=process)
        (annotated,) = tracker.annotate((stepping,), {}, host)
        leak = next((f for f in annotated.findings if f.kind == "memory_leak"), None)
        if leak is not None and found is None:
            found, found_at = leak, second
    assert found is not None and found_at is not None and found_at <= 60
    evidence = dict(found.evidence)
    assert "resident memory grows 50.0 MiB/s" in found.summary
    assert evidence["growth per second"] == "50.0 MiB"
    last = 3300 * mib + growth * found_at
    assert found.value == pytest.approx(host.memory_available_bytes / growth, rel=0.02)
    assert evidence["first / latest resident memory"].endswith(f"{last / (1 << 30):.1f} GiB")


def test_resident_memory_of_a_steady_job_is_no_leak() -> None:
    from xmon.model import HostSample, ProcessSample

    clock = Clock()
    tracker = FindingsTracker(clock, wall=clock)
    host = HostSample("h", 2, 0.1, 64 << 30, 32 << 30, 2 << 30)
    for second in range(1, 121):  # the allocator's own ups and downs, no trend
        clock.now += 1
        resident = (3300 << 20) + (second % 7) * (3 << 20)
        process = ProcessSample(1.0, float(second), resident)
        (annotated,) = tracker.annotate((replace(job(10 * second), process=process),), {}, host)
        assert "memory_leak" not in kinds((annotated,)), annotated.findings


def test_a_warming_job_whose_device_readings_are_fresh_is_no_leak() -> None:
    """A healthy transformer's resident memory grew 6 MiB/s for its first minute (allocator
    arenas, compiled code) while its device readings, fresh every step, stayed flat: no leak.
    Resident memory is the evidence only where the device readings have stopped."""
    from xmon.model import HostSample, ProcessSample

    mib = 1 << 20
    clock = Clock()
    start = clock.now
    tracker = FindingsTracker(clock, wall=clock)
    host = HostSample("h", 2, 0.1, 64 << 30, 32 << 30, 2 << 30)
    for second in range(1, 91):
        clock.now = start + second
        memory = DeviceMemory(live_array_bytes=200 * mib, live_array_read_at=clock.now)
        device = JobDevice(DeviceInfo(0, "cpu", "cpu"), memory, 0.9)
        process = ProcessSample(1.0, float(second), 400 * mib + int(6.3 * mib * second))
        warming = replace(job(10 * second), devices=(device,), process=process)
        (annotated,) = tracker.annotate((warming,), {}, host)
        assert "memory_leak" not in kinds((annotated,)), (second, annotated.findings)
