"""The host collector against the real psutil of this machine, and its maths from tables."""

from __future__ import annotations

import argparse
import os
import socket
import time

import psutil
import pytest

import xmon.collectors
from xmon.collectors import CollectContext, CollectorRunner
from xmon.collectors.host import (
    HostCollector,
    HostReading,
    ProcessReading,
    cpu_busy_ratio,
    host_sample,
    per_cpu_busy_ratios,
    process_cpu_ratio,
    process_sample,
)
from xmon.model import ProcessSample


def burn_cpu(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def context(*pids: int) -> CollectContext:
    return CollectContext(pids=pids, monotonic=time.monotonic())


def test_host_sample_is_sane() -> None:
    collector = HostCollector()
    first = collector.collect(context()).host
    assert first is not None
    assert first.cpu_utilization_ratio is None, "no interval yet: missing, not zero"
    assert first.per_cpu_utilization_ratio == ()
    burn_cpu(0.05)
    host = collector.collect(context()).host
    assert host is not None
    assert host.hostname == socket.gethostname()
    assert host.cpu_count == psutil.cpu_count()
    assert host.cpu_utilization_ratio is not None and 0.0 <= host.cpu_utilization_ratio <= 1.0
    assert len(host.per_cpu_utilization_ratio) == host.cpu_count
    assert all(0.0 <= r <= 1.0 for r in host.per_cpu_utilization_ratio)
    assert 0 < host.memory_available_bytes <= host.memory_total_bytes
    assert 0 < host.memory_used_bytes <= host.memory_total_bytes
    assert host.load_average_1m is not None and host.load_average_1m >= 0


def test_own_process_sample() -> None:
    collector = HostCollector()
    pid = os.getpid()
    first = collector.collect(context(pid)).processes[pid]
    assert first.cpu_utilization_ratio is None
    burn_cpu(0.2)
    sample = collector.collect(context(pid)).processes[pid]
    assert sample.cpu_seconds_total is not None and first.cpu_seconds_total is not None
    assert sample.cpu_seconds_total >= first.cpu_seconds_total + 0.15
    assert sample.cpu_utilization_ratio is not None
    assert 0.2 < sample.cpu_utilization_ratio < (os.cpu_count() or 1) + 0.5
    assert sample.resident_memory_bytes is not None and sample.resident_memory_bytes > 1 << 20
    assert sample.num_threads is not None and sample.num_threads >= 1
    assert collector.tracked_pids == (pid,)


def test_builtin_host_collector_is_registered() -> None:
    names = [entry.name for entry in xmon.collectors.registered()]
    assert "host" in names
    parser = argparse.ArgumentParser()
    xmon.collectors.add_collector_flags(parser)
    assert "host" in xmon.collectors.enabled_collectors(parser.parse_args([]), {})
    assert "host" not in xmon.collectors.enabled_collectors(
        parser.parse_args(["--no-collector.host"])
    )


def test_host_runs_from_the_registry_in_the_runner() -> None:
    runner = CollectorRunner(["host"], timeout=2)
    try:
        runner.run(context(os.getpid()))
        burn_cpu(0.05)
        output, (health,) = runner.run(context(os.getpid()))
    finally:
        runner.close()
    assert health.name == "host" and health.up and health.errors_total == 0
    assert output.host is not None and output.host.cpu_utilization_ratio is not None
    assert output.processes[os.getpid()].cpu_utilization_ratio is not None


# --- maths ------------------------------------------------------------------------------------

LINUX_TIMES = dict(user=0.0, nice=0.0, system=0.0, idle=0.0, iowait=0.0, irq=0.0, softirq=0.0,
                   steal=0.0, guest=0.0, guest_nice=0.0)  # fmt: skip


def times(**values: float) -> dict[str, float]:
    return {**LINUX_TIMES, **values}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (times(), times(user=1, idle=3), 0.25),
        (times(), times(user=1, system=1, idle=2), 0.5),
        (times(), times(iowait=2, idle=2), 0.0),  # iowait is idle time
        (times(), times(user=2, guest=1, idle=2), 0.5),  # guest is inside user already
        (times(), times(steal=1, idle=1), 0.5),  # steal counts as busy, as in psutil
        (times(idle=5, user=5), times(idle=4, user=6), 1.0),  # a counter going back is clamped
        (times(idle=5), times(idle=5), None),  # no time passed
        ({"user": 0.0, "idle": 0.0}, {"user": 3.0, "idle": 1.0}, 0.75),  # a non-Linux shape
    ],
)
def test_cpu_busy_ratio(
    before: dict[str, float], after: dict[str, float], expected: float | None
) -> None:
    assert cpu_busy_ratio(before, after) == (None if expected is None else pytest.approx(expected))


def test_per_cpu_busy_ratios() -> None:
    before = (times(), times())
    after = (times(user=1, idle=1), times(idle=2))
    assert per_cpu_busy_ratios(before, after) == (0.5, 0.0)
    assert per_cpu_busy_ratios(before, after[:1]) == (), "a CPU went away: no per-CPU numbers"
    assert per_cpu_busy_ratios(before, (times(), times(idle=1))) == ()


def reading(monotonic: float, cpu: float) -> ProcessReading:
    return ProcessReading(cpu, 1000, 4, monotonic)


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        (None, reading(1.0, 5.0), None),
        (reading(1.0, 5.0), reading(3.0, 6.0), 0.5),
        (reading(1.0, 5.0), reading(2.0, 8.0), 3.0),  # three busy threads
        (reading(1.0, 5.0), reading(1.0, 6.0), None),  # same tick
        (reading(1.0, 5.0), reading(2.0, 4.0), 0.0),  # never negative
    ],
)
def test_process_cpu_ratio(
    previous: ProcessReading | None, current: ProcessReading, expected: float | None
) -> None:
    assert process_cpu_ratio(current, previous) == expected


def test_process_and_host_sample_from_readings() -> None:
    assert process_sample(reading(2.0, 6.0), reading(1.0, 5.0)) == ProcessSample(
        cpu_utilization_ratio=1.0, cpu_seconds_total=6.0, resident_memory_bytes=1000,
        num_threads=4,
    )  # fmt: skip
    before = HostReading("h", 2, times(), (times(), times()), 100, 40, 60, 0.5)
    after = HostReading("h", 2, times(user=1, idle=3), (times(user=1, idle=1), times(idle=2)),
                        100, 50, 50, 0.7)  # fmt: skip
    sample = host_sample(after, before)
    assert sample.cpu_utilization_ratio == 0.25
    assert sample.per_cpu_utilization_ratio == (0.5, 0.0)
    assert (sample.memory_used_bytes, sample.load_average_1m) == (50, 0.7)
    assert host_sample(after, None).cpu_utilization_ratio is None
