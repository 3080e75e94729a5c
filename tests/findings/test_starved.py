"""An oversubscribed host is not the job's problem: threads waiting for a CPU (run-queue time
from /proc/PID/task/*/schedstat) keep the host-bound finding and the step-time trigger quiet."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from xmon.collectors.host import ProcessReading, process_sample, run_queue_seconds
from xmon.daemon.triggers import TriggerEngine, TriggerRules
from xmon.findings.host_bound import detect_host_bound, starved
from xmon.model import (
    CompileStats,
    DaemonStats,
    DeviceInfo,
    DeviceMemory,
    Goodput,
    HostSample,
    Job,
    JobDevice,
    LedgerStats,
    ProcessSample,
    Snapshot,
    StepStats,
)


def test_run_queue_seconds_sums_every_thread(tmp_path: Path) -> None:
    for tid, stat in (("10", "500 2000000000 7\n"), ("11", "1 500000000 2\n")):
        (tmp_path / "10" / "task" / tid).mkdir(parents=True)
        (tmp_path / "10" / "task" / tid / "schedstat").write_text(stat)
    assert run_queue_seconds(tmp_path, 10) == pytest.approx(2.5)
    assert run_queue_seconds(tmp_path, 99) is None  # gone, or no schedstat here
    assert run_queue_seconds(Path("/proc"), os.getpid()) is not None  # this kernel keeps it


def test_wait_threads_is_run_queue_time_per_wall_second() -> None:
    before = ProcessReading(10.0, 1, 4, monotonic=100.0, run_queue_seconds_total=5.0)
    after = replace(before, cpu_seconds_total=11.0, monotonic=102.0, run_queue_seconds_total=7.4)
    sample = process_sample(after, before)
    assert sample.cpu_wait_threads == pytest.approx(1.2)
    assert sample.cpu_utilization_ratio == pytest.approx(0.5)
    assert process_sample(replace(after, run_queue_seconds_total=None), before).cpu_wait_threads \
        is None  # fmt: skip


@pytest.mark.parametrize(
    ("wait", "used", "is_starved"),
    [
        (1.2, 0.8, True),  # measured: an MLP among four jobs on two busy cores
        (0.0, 1.9, False),  # an idle host: never waits
        (0.1, 0.2, False),  # a sleeping (input-bound) job waits little in all
        (0.3, 1.8, False),  # waits, but runs six times as long: not what slows it
        (None, 0.8, False),  # no schedstat: judged as before
    ],
)
def test_starved(wait: float | None, used: float, is_starved: bool) -> None:
    assert starved(ProcessSample(used, 1.0, 1, 4, cpu_wait_threads=wait)) is is_starved


def _job(steps: tuple[float, ...], busy: float, wait: float | None) -> Job:
    device = JobDevice(DeviceInfo(0, "cpu", "cpu"), DeviceMemory(), busy_ratio=busy)
    stats = StepStats(steps_total=len(steps), window=steps[-64:], steps_per_second=10.0,
                      p50_step_seconds=0.1, p90_step_seconds=0.11)  # fmt: skip
    return Job(job_name="j", pid=7, hostname="h", platform="cpu", jax_version="",
               jaxlib_version="", devices=(device,), steps=stats, compile=CompileStats(),
               process=ProcessSample(0.8, 1.0, 1, 4, cpu_wait_threads=wait),
               ledger=LedgerStats(samples=2))  # fmt: skip


def test_a_starved_job_is_told_apart_by_who_holds_the_cores() -> None:
    """Waiting for a CPU: on a host whose other processes hold the cores, an info saying so
    (the fix is elsewhere); where the job's own threads fill them (a numpy loader beside XLA's
    threads), a host-bound warning. Silence was the answer before, to both."""
    fed = detect_host_bound(_job((0.1,) * 40, 0.3, wait=None), 0.0)
    assert fed is not None and fed.severity == "warning"
    shared_host = HostSample("h", 2, 0.95, 8 << 30, 4 << 30, 4 << 30)  # 1.9 cores, 0.8 the job's
    shared = detect_host_bound(_job((0.1,) * 40, 0.3, wait=1.2), 0.0, host=shared_host)
    assert shared is not None and shared.severity == "info"
    assert "other processes hold" in shared.summary and "oversubscribed" in shared.fix
    assert dict(shared.evidence)["other processes' busy cores"] == "1.10"
    own_host = HostSample("h", 2, 0.45, 8 << 30, 4 << 30, 4 << 30)  # 0.9 cores: the job's 0.8
    own = detect_host_bound(_job((0.1,) * 40, 0.3, wait=1.2), 0.0, host=own_host)
    assert own is not None and own.severity == "warning"
    assert "its own threads filling the cores" in own.summary
    unknown = detect_host_bound(_job((0.1,) * 40, 0.3, wait=1.2), 0.0)  # who else: unknown
    assert unknown is not None and unknown.severity == "info"


def test_steps_of_a_starved_job_are_not_judged() -> None:
    def snap(job: Job) -> Snapshot:
        return Snapshot(seq=1, wall_time=0.0, monotonic=0.0, hostname="h",
                        daemon=DaemonStats("0", 0.0), jobs=(job,))  # fmt: skip

    rules = TriggerRules(step_time_factor=3.0, min_steps=10, min_interval_seconds=60)
    # (wait in the snapshot before the slow step's, wait in its own, fires)
    for before, now, fires in ((1.2, 1.2, False), (1.2, 0.0, False), (0.0, 0.0, True)):
        engine = TriggerEngine(rules, lambda: 0.0)
        history = (0.1,) * 30
        engine.evaluate(snap(_job(history, 0.9, 0.0)))
        history += (0.1,) * 20
        assert engine.evaluate(snap(_job(history, 0.9, before))) == []
        history += (3.0,)  # a slow step spans snapshots: the wait before it counts too
        assert bool(engine.evaluate(snap(_job(history, 0.9, now)))) is fires


def test_the_tracker_judges_the_wait_over_recent_ticks() -> None:
    from xmon.findings.tracker import FindingsTracker

    # 300 s of wall time, most of it waiting for the host: low goodput, judged like host_bound
    goodput = Goodput(300.0, (("productive", 90.0), ("host_wait", 200.0), ("startup", 10.0)),
                      0.3, 0.3, None, "host_wait")  # fmt: skip

    def last_kinds(waiting: float) -> list[str]:
        now = [0.0]
        tracker = FindingsTracker(clock=lambda: now[0], wall=lambda: now[0])
        kinds: list[str] = []
        for tick in range(41):  # one tick in five (the last one too) it did not wait
            now[0] = tick * 0.5
            wait = 0.0 if tick % 5 == 0 else waiting
            job = replace(_job((0.1,) * (50 + tick), 0.3, wait), compile=CompileStats(1),
                          goodput=goodput)  # fmt: skip
            (judged,) = tracker.annotate((job,), {}, None)
            kinds = [x for f in judged.findings if f.kind in ("host_bound", "low_goodput")
                     for x in (f.kind, f.severity)]  # fmt: skip
        return kinds

    # the last tick alone: warnings
    assert last_kinds(1.2) == ["host_bound", "info", "low_goodput", "info"]
    assert last_kinds(0.0) == ["host_bound", "warning", "low_goodput", "warning"]
