"""Whoever can reach the socket can send any hello and any number: one job (buggy or hostile)
must not evict another, take down a collector, stop the TensorBoard export of every job, or
put control characters into /metrics."""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xmon.agent.transport import Transport
from xmon.daemon.intake.sanitize import scrub
from xmon.daemon.received import MAX_LABEL_CHARS, clean_label
from xmon.exporters.tensorboard import TensorBoardExporter
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

from support.procs import Daemon, wait_for
from support.profiling_procs import profiling_daemon

pytestmark = pytest.mark.e2e


def _hello(pid: int, name: str, **fields: object) -> xmon_pb2.AgentMessage:
    hello = xmon_pb2.AgentHello(protocol_version=1, pid=pid, job_name=name, **fields)
    return xmon_pb2.AgentMessage(hello=hello)


def _agent(daemon: Daemon, pid: int, name: str, **fields: object) -> Transport:
    transport = Transport(f"unix://{daemon.socket_path}", lambda: _hello(pid, name, **fields),
                          lambda command: None)  # fmt: skip
    transport.start()
    return transport


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    proc = profiling_daemon(tmp_path / "d")
    yield proc
    proc.stop()


@pytest.fixture
def gone_pid() -> int:
    """The pid of a process that has exited: no process on this host holds it, so the daemon
    cannot check a claim of it (as for a job in another pid namespace) and accepts it."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _jobs(daemon: Daemon) -> set[str]:
    return {
        line.split('job_name="')[1].split('"')[0]
        for line in daemon.scrape().splitlines()
        if line.startswith("xmon_job_info{")
    }


def test_a_hello_claiming_an_attached_pid_does_not_evict_that_job(daemon: Daemon) -> None:
    victim_pid = os.getpid()  # this process holds the victim's connection: a verified claim
    victim = _agent(daemon, victim_pid, "victim")
    try:
        wait_for(lambda: _jobs(daemon) == {"victim"}, 20, "the victim to attach")
        with grpc.insecure_channel(f"unix://{daemon.socket_path}") as channel:
            stub = xmon_pb2_grpc.IngestStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                list(stub.Connect(iter([_hello(victim_pid, "impostor")]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        time.sleep(1.0)
        assert _jobs(daemon) == {"victim"} and victim.connected
    finally:
        victim.stop()


@pytest.mark.parametrize("pid", [-1, 0, -(2**31), 2**31 - 1])
def test_an_impossible_pid_is_refused_and_the_host_collector_stays_up(
    daemon: Daemon, pid: int
) -> None:
    with grpc.insecure_channel(f"unix://{daemon.socket_path}") as channel:
        stub = xmon_pb2_grpc.IngestStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Connect(iter([_hello(pid, "bad")]), timeout=10))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    time.sleep(1.0)
    assert 'xmon_collector_up{collector="host"} 1.0' in daemon.scrape()


def test_hostile_numbers_and_strings_harm_no_other_job(
    daemon: Daemon, gone_pid: int, tmp_path: Path
) -> None:
    hostile = "cpu\x00\u2028\u0085\x1b[2J"
    bad = _agent(daemon, gone_pid, "bad", started_at=math.inf, platform=hostile,
                 hostname=hostile)  # fmt: skip
    good = _agent(daemon, os.getpid(), "good", started_at=time.time())
    run = tmp_path / "d" / "tb" / f"good-{os.getpid()}"
    try:

        def good_scalars() -> bool:
            acc = EventAccumulator(str(run))
            acc.Reload()
            return bool(acc.Tags()["scalars"])

        wait_for(good_scalars, 20, "the good job's TensorBoard scalars")
        text = daemon.scrape()
        for bad_char in ("\x00", "\u2028", "\u0085", "\x1b"):
            assert bad_char not in text
        start = [line for line in text.splitlines() if line.startswith("xmon_job_start_time")]
        assert not any("Inf" in line or "NaN" in line for line in start), start
    finally:
        bad.stop()
        good.stop()


def test_scrub_drops_non_finite_numbers_and_impossible_times_everywhere() -> None:
    report = xmon_pb2.AgentReport(wall_time=math.nan)
    report.steps.recent_step_seconds.extend([0.5, math.inf, 0.25, -math.inf])
    report.compile_events.add(wall_time=1e300, duration_seconds=math.nan)
    report.programs.add(fingerprint="p", flops=math.inf, compiled_at=-5.0)
    assert scrub(report) == 7
    assert list(report.steps.recent_step_seconds) == [0.5, 0.25]
    assert not report.programs[0].HasField("flops") and report.programs[0].compiled_at == 0
    hello = _hello(1, "x", started_at=math.inf).hello
    assert scrub(hello) == 1 and hello.started_at == 0.0


def test_scrub_walks_types_that_hold_themselves_and_maps_of_messages() -> None:
    """google.protobuf.Struct: a map of Values, a Value holding a Struct or a list of Values."""
    struct = struct_pb2.Struct()
    struct.update({"ok": 1.5, "deep": {"list": [2.0, {"bad": 1.0}], "also": 3.0}})
    struct["deep"]["list"].values[1].struct_value["bad"] = math.nan
    struct["deep"]["also"] = math.inf
    assert scrub(struct) == 2
    assert struct["ok"] == 1.5 and list(struct["deep"]["list"])[0] == 2.0
    assert not struct["deep"].fields["also"].HasField("number_value")
    assert scrub(struct) == 0


@pytest.mark.parametrize(
    ("name", "cleaned"),
    [
        ("jit_train_step", "jit_train_step"),
        ("", "unnamed"),
        ("a\x00b\nc\x1b[2J", "a?b?c?[2J"),
        ("line\u2028sep\u0085", "line?sep?"),
        ("x" * 500, "x" * MAX_LABEL_CHARS),
        ("\x07" * 500, "?" * MAX_LABEL_CHARS),
    ],
)
def test_names_from_agents_are_cut_and_cleaned(name: str, cleaned: str) -> None:
    assert clean_label(name) == cleaned


def test_a_step_of_2_to_the_63_leaves_out_that_job_s_points_only(tmp_path: Path) -> None:
    """A job's TensorBoard step past int64 made writing its point raise, which stopped the
    export of every job (``ValueError: Value out of range``)."""
    from support.tb_snapshots import STARTED, job, snapshot

    exporter = TensorBoardExporter(tmp_path, interval_seconds=0)
    for i in range(2):
        jobs = (job(pid=1, name="hostile", steps=2**63), job(pid=2, name="good", steps=10 + i))
        exporter.update(snapshot(STARTED + 1 + i, jobs))
    exporter.close()
    assert exporter.health().up and exporter.steps_refused_total == 2
    good = EventAccumulator(str(tmp_path / "good-2"))
    good.Reload()
    assert [e.step for e in good.Scalars("steps/steps_total")] == [10, 11]
