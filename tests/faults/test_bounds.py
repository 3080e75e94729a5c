"""Bounded resources under a flood or a buggy client: the in-process cases (docs/reliability.md).

The real-process floods (padded reports, 100,000 devices, idle connections, stalled views) are
in test_floods.py.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from xmon.daemon import memory
from xmon.daemon.bounds import Limits, StateBudget, connection_cap
from xmon.daemon.intake.convert import (
    MAX_BRANCH_OPS,
    MAX_BRANCHES,
    MAX_CONDITIONALS,
    hello_of,
    report_of,
)
from xmon.daemon.jobs import JobState
from xmon.daemon.ledger_reader import LedgerReader
from xmon.execution.ledger import JobLedger
from xmon.execution.samples import ExecutionSample
from xmon.exporters.prometheus import MetricsEndpoint
from xmon.exporters.tensorboard import TensorBoardExporter
from xmon.wire.client import decode
from xmon.wire.proto import xmon_pb2
from xmon.wire.snapshot_encoding import fitting_snapshot

from support.flood_attacks import padded, slow_metrics_clients, varint
from support.sample_snapshots import snapshot, train_job


def _hello(pid: int = 1, devices: int = 0) -> xmon_pb2.AgentHello:
    return xmon_pb2.AgentHello(
        protocol_version=1, job_name="bounded", pid=pid, platform="cpu",
        devices=[xmon_pb2.DeviceInfo(id=i, platform="cpu") for i in range(devices)],
    )  # fmt: skip


def _programs(count: int, start: int = 0) -> list[xmon_pb2.ProgramInfo]:
    return [
        xmon_pb2.ProgramInfo(fingerprint=f"{i:064x}", name=f"jit_p{i}", compiled_at=float(i + 1))
        for i in range(start, start + count)
    ]


def job(hello: xmon_pb2.AgentHello, budget: StateBudget | None = None) -> JobState:
    """A job's state as the intake makes it of its hello."""
    budget = budget or StateBudget()
    return JobState(hello=hello_of(hello, budget), connected_at=0.0, budget=budget)


def take(state: JobState, report: xmon_pb2.AgentReport) -> None:
    """Hand a report to the job as the intake does."""
    state.apply(report_of(report, state.budget, state.devices), 1.0, 1.0)


def test_unknown_fields_of_reports_and_hellos_are_not_kept() -> None:
    state = job(xmon_pb2.AgentHello.FromString(padded(_hello().SerializeToString(), 1 << 20)))
    report = xmon_pb2.AgentReport.FromString(
        padded(xmon_pb2.AgentReport(seq=1).SerializeToString(), 4 << 20)
    )
    report.memory.add(device_id=0, stats={"bytes_in_use": 1, "k" * 10_000: 2})
    take(state, report)
    assert state.hello.estimated_bytes < 2048
    assert state.report is not None and state.report.estimated_bytes < 8192
    assert state.held_bytes < 64 * 1024
    assert dict(state.report.memory[0].stats) == {"bytes_in_use": 1}


def test_what_a_job_keeps_leaves_the_padding_with_the_received_message() -> None:
    """protobuf's upb runtime frees a message's arena only with the whole message: a slim copy
    made with CopyFrom and DiscardUnknownFields kept a padded hello's 15 MiB (and a report's
    padded counters) for the stream's life, where ByteSize() cannot see it. The model objects
    the intake makes hold nothing of the message."""
    hello_bytes = padded(_hello().SerializeToString(), 15 << 20)
    steps = padded(xmon_pb2.StepCounters(steps_total=1).SerializeToString(), 15 << 20)
    report_bytes = xmon_pb2.AgentReport(seq=1).SerializeToString() + bytes([(7 << 3) | 2])
    report_bytes += varint(len(steps)) + steps  # field 7: steps, padded inside
    process = psutil.Process()
    memory.trim()
    before = process.memory_info().rss
    states = []
    for _ in range(4):
        state = job(xmon_pb2.AgentHello.FromString(hello_bytes))
        take(state, xmon_pb2.AgentReport.FromString(report_bytes))
        states.append(state)
    memory.trim()
    growth = (process.memory_info().rss - before) / 2**20
    assert growth < 16, f"4 jobs kept {growth:.0f} MiB of 120 MiB of padding"
    assert all(state.report is not None and state.report.steps.steps_total == 1 for state in states)


def test_devices_programs_and_stats_are_capped_per_job() -> None:
    budget = StateBudget(Limits(devices_per_job=16, programs_per_job=100, stats_per_device=4))
    state = job(_hello(devices=100_000), budget)
    report = xmon_pb2.AgentReport(programs=_programs(300))
    report.memory.add(device_id=0, stats={f"stat{i}": i for i in range(10)})
    take(state, report)
    assert len(state.devices) == 16 and len(state.programs) == 100
    assert len(state.report.memory[0].stats) == 4  # type: ignore[union-attr]
    assert budget.refused == {"devices": 100_000 - 16, "programs": 200, "memory_stats": 6}


def test_a_report_s_device_lists_are_cut_to_the_cap_before_they_are_read() -> None:
    budget = StateBudget(Limits(devices_per_job=16))
    state = job(_hello(devices=4), budget)
    report = xmon_pb2.AgentReport()
    for i in range(1000):
        report.memory.add(device_id=i, stats={"bytes_in_use": i})
        report.devices.add(id=i, platform="cpu")
    take(state, report)
    assert len(report.memory) == len(report.devices) == 16  # the received message, cut
    assert list(state.report.memory) == list(range(16))  # type: ignore[union-attr]
    assert len(state.devices) == 16
    assert budget.refused["devices"] == 2 * (1000 - 16)


def test_job_and_total_memory_bounds() -> None:
    budget = StateBudget(Limits(job_bytes=1 << 20, state_bytes=3 << 19))
    first = job(_hello(1), budget)
    take(first, xmon_pb2.AgentReport(programs=_programs(4096)))
    assert first.held_bytes <= 1 << 20 and budget.refused["job_bytes"] > 0
    second = job(_hello(2), budget)
    take(second, xmon_pb2.AgentReport(programs=_programs(4096)))
    assert budget.in_use <= 3 << 19 and budget.refused["state_bytes"] > 0
    first.release()
    assert budget.in_use == second.held_bytes  # a job that leaves gives its bytes back


def _with_conditionals(program: xmon_pb2.ProgramInfo) -> xmon_pb2.ProgramInfo:
    """The program with as many conditionals as the intake takes, of long names."""
    program.flops_upper_bound = True
    for c in range(MAX_CONDITIONALS):
        conditional = program.conditionals.add(name="c" * 128 + str(c), counted_flops=1.0)
        for _ in range(MAX_BRANCHES):
            conditional.branches.add(flops=1.0, ops=["o" * 128] * MAX_BRANCH_OPS)
    return program


def test_a_program_s_conditionals_count_against_the_job_s_bytes() -> None:
    """A program sent again with its conditionals described grows what the job holds by
    their size, within the job's bound: past it, the program stays as it was."""
    budget = StateBudget(Limits(job_bytes=1 << 20))
    state = job(_hello(), budget)
    take(state, xmon_pb2.AgentReport(programs=_programs(1)))
    before = state.held_bytes
    take(state, xmon_pb2.AgentReport(programs=[_with_conditionals(_programs(1)[0])]))
    grown = state.held_bytes - before
    assert grown > MAX_CONDITIONALS * MAX_BRANCHES * MAX_BRANCH_OPS * 128  # its strings at least
    (kept,) = state.programs.values()
    assert len(kept.conditionals) == MAX_CONDITIONALS
    small = StateBudget(Limits(job_bytes=before + grown // 2))
    tight = job(_hello(2), small)
    take(tight, xmon_pb2.AgentReport(programs=_programs(1)))
    take(tight, xmon_pb2.AgentReport(programs=[_with_conditionals(_programs(1)[0])]))
    (kept,) = tight.programs.values()
    assert kept.conditionals == () and small.refused["job_bytes"] == 1


def test_a_snapshot_too_large_for_a_message_still_reaches_views() -> None:
    # 8 jobs x 4,096 programs over a 16 MiB limit, scaled down eightfold to keep the test short
    jobs = tuple(train_job(n_programs=512) for _ in range(8))
    message, left_out = fitting_snapshot(snapshot(jobs), 2 * 1024 * 1024)
    assert message.ByteSize() <= 2 * 1024 * 1024
    decoded = decode(message)
    assert len(decoded.jobs) == 8 and all(len(job.programs) == 512 for job in decoded.jobs)
    assert left_out == 0  # compressed, every program fits
    tight, left_out = fitting_snapshot(snapshot(jobs), 128 * 1024)
    decoded = decode(tight)
    assert tight.ByteSize() <= 128 * 1024 and len(decoded.jobs) == 8
    assert left_out == 8 * 512 - sum(len(job.programs) for job in decoded.jobs) > 0


def test_execution_samples_in_flight_are_bounded_over_all_jobs() -> None:
    async def flood() -> tuple[int, int]:
        reader = LedgerReader(max_inflight_bytes=64 << 20)
        sample = ExecutionSample(started_at=1.0, duration_seconds=0.2, xspace=b"\0" * (8 << 20))
        accepted = sum(reader.submit(JobLedger(), sample) for _ in range(40))
        peak = reader.inflight_bytes
        await reader.drain()
        return accepted, peak

    accepted, peak = asyncio.run(flood())
    assert accepted == 8 and peak <= 64 << 20


def test_connection_cap_stays_below_the_descriptor_limit() -> None:
    assert connection_cap(4096, 1024) == 1024 - 128
    assert connection_cap(100, 20_000) == 100


def _scrape(url: str) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200 and response.read()
    return time.monotonic() - started


def test_metrics_serves_many_scrapers_and_survives_slow_clients() -> None:
    endpoint = MetricsEndpoint(max_connections=256)
    host, port = endpoint.start("127.0.0.1", 0)
    endpoint.update(snapshot())
    url = f"http://{host}:{port}/metrics"
    threads_before = threading.active_count()
    slow: list[socket.socket] = []
    try:
        slow = slow_metrics_clients(host, port, 400)  # each sends half a request, then nothing
        assert _scrape(url) < 1.0
        with ThreadPoolExecutor(50) as pool:
            times = sorted(pool.map(lambda _: _scrape(url), range(200)))
        assert times[int(0.99 * len(times)) - 1] < 1.0, times[-5:]
        assert threading.active_count() - threads_before <= 8
        assert endpoint.refused["metrics_connections"] >= 400 - 256
    finally:
        for sock in slow:
            sock.close()
        endpoint.stop()


def test_tensorboard_bytes_of_one_job_are_bounded(tmp_path: Path) -> None:
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, job_max_bytes=1 << 20)
    job = train_job(n_programs=1)
    big = snapshot((job,))
    devices = tuple(job.devices) * 200  # a job with 400 devices' scalars
    jobs = (type(job)(**{**job.__dict__, "devices": devices}),)
    for seq in range(300):
        exporter.update(type(big)(**{**big.__dict__, "jobs": jobs, "seq": seq}))
    exporter.close()
    written = sum(f.stat().st_size for f in tmp_path.rglob("events.*"))
    assert written <= (1 << 20) + 64 * 1024, written
    assert exporter.rotations_total > 0
