"""The daemon keeps serving whatever arrives on its socket."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest

from xmon.agent.transport import Outgoing, Transport
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

from support.procs import Daemon, start_daemon, start_job, wait_for

pytestmark = pytest.mark.e2e

# These clients claim made-up pids (a live process may hold one): the daemon checks no claims.
UNCHECKED_PIDS = {"XMON_VERIFY_PIDS": "off"}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    proc = start_daemon(tmp_path / "daemon", env=UNCHECKED_PIDS)
    yield proc
    proc.stop()


def _hello(pid: int = 4242, job_name: str = "fault", version: int = 1) -> xmon_pb2.AgentMessage:
    return xmon_pb2.AgentMessage(
        hello=xmon_pb2.AgentHello(
            protocol_version=version, job_name=job_name, pid=pid, hostname="h", platform="cpu"
        )
    )


def _healthy(daemon: Daemon) -> bool:
    """Alive and serving snapshots (the first one may still be on its way after start)."""
    wait_for(lambda: "xmon_up 1.0" in daemon.scrape(), 10, "the daemon to serve a snapshot")
    return daemon.alive()


def _agent(daemon: Daemon, job_name: str, pid: int) -> Transport:
    transport = Transport(f"unix://{daemon.socket_path}", lambda: _hello(pid, job_name), print)
    transport.start()
    wait_for(lambda: transport.connected, 20, f"agent {job_name} to connect")
    report = xmon_pb2.AgentMessage(report=xmon_pb2.AgentReport(seq=1))
    transport.offer(Outgoing(report))
    return transport


def test_socket_is_not_world_writable(daemon: Daemon) -> None:
    mode = stat.S_IMODE(os.stat(daemon.socket_path).st_mode)
    assert mode & stat.S_IWOTH == 0, oct(mode)


def test_garbage_bytes_on_the_socket(daemon: Daemon) -> None:
    payloads = [
        os.urandom(4096),
        b"GET / HTTP/1.1\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512),
        b"\x00" * 65536,
    ]
    for payload in payloads:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(str(daemon.socket_path))
            raw.sendall(payload)
    assert _healthy(daemon)
    agent = _agent(daemon, "after-garbage", 5001)
    wait_for(lambda: 'job_name="after-garbage"' in daemon.scrape(), 20, "a good agent to report")
    agent.stop()


def test_wrong_first_message_and_unknown_protocol_are_refused(daemon: Daemon) -> None:
    channel = grpc.insecure_channel(f"unix://{daemon.socket_path}")
    stub = xmon_pb2_grpc.IngestStub(channel)
    report_first = iter([xmon_pb2.AgentMessage(report=xmon_pb2.AgentReport(seq=1))])
    with pytest.raises(grpc.RpcError) as error:
        list(stub.Connect(report_first, timeout=10))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as error:
        list(stub.Connect(iter([_hello(version=99)]), timeout=10))
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "protocol version 99" in (error.value.details() or "")
    channel.close()
    assert _healthy(daemon)


def test_oversized_message_is_rejected_without_harm(daemon: Daemon) -> None:
    channel = grpc.insecure_channel(
        f"unix://{daemon.socket_path}", options=[("grpc.max_send_message_length", 64 << 20)]
    )
    stub = xmon_pb2_grpc.IngestStub(channel)
    huge = xmon_pb2.AgentReport(
        programs=[
            xmon_pb2.ProgramInfo(fingerprint="x" * 1024, name="y" * 1024) for _ in range(20000)
        ]
    )
    with pytest.raises(grpc.RpcError) as error:
        list(stub.Connect(iter([_hello(), xmon_pb2.AgentMessage(report=huge)]), timeout=20))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    channel.close()
    assert _healthy(daemon)


def test_truncated_and_random_protobufs_in_valid_frames(daemon: Daemon) -> None:
    channel = grpc.insecure_channel(f"unix://{daemon.socket_path}")
    good = _hello().SerializeToString()
    connect = channel.stream_stream(
        "/xmon.v1.Ingest/Connect", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    cases = [[good[:cut]] for cut in range(1, len(good), 7)] + [
        [good, os.urandom(64)],
        [os.urandom(256)],
        [good, good[:-3]],
    ]
    for frames in cases:
        try:  # some prefixes parse as a shorter valid message; none may hurt the daemon
            list(connect(iter(frames), timeout=10))
        except grpc.RpcError as error:
            assert error.code() != grpc.StatusCode.UNAVAILABLE, error
    channel.close()
    assert _healthy(daemon)


def test_a_client_that_connects_and_stalls_blocks_nobody(daemon: Daemon) -> None:
    stalled = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(20)]
    for raw in stalled:
        raw.connect(str(daemon.socket_path))
    try:
        agent = _agent(daemon, "beside-stalled", 5002)
        wait_for(lambda: 'job_name="beside-stalled"' in daemon.scrape(), 20, "the agent's data")
        agent.stop()
        assert _healthy(daemon)
    finally:
        for raw in stalled:
            raw.close()


def test_a_thousand_connect_disconnect_cycles(daemon: Daemon) -> None:
    process = psutil.Process(daemon.popen.pid)
    code = f"""
import time
import grpc
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
hello = xmon_pb2.AgentMessage(
    hello=xmon_pb2.AgentHello(protocol_version=1, job_name="cycle", pid=7)
)
held = 0
for i in range(1000):
    while True:
        channel = grpc.insecure_channel("unix://{daemon.socket_path}")
        call = xmon_pb2_grpc.IngestStub(channel).Connect(iter([hello]))
        try:
            next(call)  # the welcome: the stream was really established
            break
        except grpc.RpcError as error:
            # the daemon has not yet seen the last cycle's stream end: pid 7 is still held
            assert error.code() == grpc.StatusCode.ALREADY_EXISTS, error
            held += 1
            time.sleep(0.01)
        finally:
            call.cancel()
            channel.close()
print("done", held)
"""
    rss_before = process.memory_info().rss
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.startswith("done"), result.stderr
    print(f"cycles refused while the last one's stream was ending: {result.stdout.split()[1]}")
    wait_for(lambda: "xmon_agents_connected 0.0" in daemon.scrape(), 20, "all streams to close")
    assert 'job_name="cycle"' not in daemon.scrape()
    growth = process.memory_info().rss - rss_before
    assert growth < 30 * 2**20, f"daemon RSS grew by {growth / 2**20:.1f} MiB"
    assert _healthy(daemon)


def test_agent_killed_mid_stream_disappears(tmp_path: Path, daemon: Daemon) -> None:
    script = (
        "import time, jax, jax.numpy as jnp\njnp.ones(3).block_until_ready()\ntime.sleep(600)\n"
    )
    job = start_job(tmp_path, daemon.socket_path, script, "victim")
    try:
        wait_for(lambda: 'job_name="victim"' in daemon.scrape(), 60, "the job to report")
        job.stop(signal.SIGKILL)
        wait_for(lambda: 'job_name="victim"' not in daemon.scrape(), 10, "its series to vanish")
        assert _healthy(daemon)
    finally:
        job.stop(signal.SIGKILL)


def test_client_strings_are_bounded(daemon: Daemon) -> None:
    agent = Transport(
        f"unix://{daemon.socket_path}", lambda: _hello(5003, "j" * 10_000 + "\x1b[31m"), print
    )
    agent.start()
    try:
        wait_for(lambda: agent.connected, 20, "connect")
        agent.offer(Outgoing(xmon_pb2.AgentMessage(report=xmon_pb2.AgentReport(seq=1))))
        wait_for(lambda: "xmon_job_info" in daemon.scrape(), 20, "the job's series")
        text = daemon.scrape()
        names = [line for line in text.splitlines() if line.startswith("xmon_job_info")]
        assert names and all(len(line) < 1000 and "\x1b" not in line for line in names)
    finally:
        agent.stop()


def test_daemon_refuses_a_second_daemon_on_the_same_socket(daemon: Daemon) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "xmon",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--socket",
            str(daemon.socket_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=daemon.extra_env,
    )
    assert result.returncode == 1
    assert "already listening" in result.stderr and "Traceback" not in result.stderr
    assert _healthy(daemon)


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("period_seconds = 'fast'\n")
    result = subprocess.run(
        [sys.executable, "-m", "xmon", "daemon", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "period_seconds" in result.stderr and "Traceback" not in result.stderr


def test_agent_streams_are_capped(tmp_path: Path) -> None:
    config = tmp_path / "xmon.toml"
    config.write_text("max_agents = 2\n")
    daemon = start_daemon(tmp_path / "d", env=UNCHECKED_PIDS, extra_args=["--config", str(config)])
    agents = [_agent(daemon, f"capped{i}", 6000 + i) for i in range(2)]
    third = Transport(f"unix://{daemon.socket_path}", lambda: _hello(6002, "third"), print)
    third.start()
    try:
        wait_for(lambda: "RESOURCE_EXHAUSTED" in third.counters.last_error, 20, "the third refused")
        assert not third.connected
        assert "max_agents" in third.counters.last_error
        wait_for(lambda: 'job_name="capped1"' in daemon.scrape(), 20, "the admitted agents")
        text = daemon.scrape()
        assert 'job_name="capped0"' in text and 'job_name="third"' not in text
        agents.pop().stop()  # a slot frees up: the refused agent gets in on its next retry
        wait_for(lambda: third.connected, 30, "the third agent to be let in")
    finally:
        third.stop()
        for agent in agents:
            agent.stop()
        daemon.stop()
