"""The daemon's socket, signals and shutdown: what a busy shared host does to a daemon."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xmon.agent.transport import Transport
from xmon.config import DaemonConfig
from xmon.daemon.service import Daemon
from xmon.wire.proto import xmon_pb2

from support.flood_attacks import RawStream, hello, report
from support.procs import base_env, spawn, start_daemon, wait_for

pytestmark = pytest.mark.e2e


def _agent(socket_path: Path, pid: int) -> Transport:
    def hello() -> xmon_pb2.AgentMessage:
        return xmon_pb2.AgentMessage(hello=xmon_pb2.AgentHello(protocol_version=1, pid=pid,
                                                               job_name=f"j{pid}"))  # fmt: skip

    transport = Transport(f"unix://{socket_path}", hello, lambda command: None)
    transport.start()
    return transport


def _daemon_cmd(socket_path: Path) -> list[str]:
    return [sys.executable, "-m", "xmon", "daemon", "--listen", "127.0.0.1:0",
            "--socket", str(socket_path), "--period", "0.2"]  # fmt: skip


def _run_daemon(tmp_path: Path, socket_path: Path) -> tuple[int, str]:
    proc = spawn(_daemon_cmd(socket_path), tmp_path / "d.log", base_env(XMON_LOGDIR=str(tmp_path)))
    proc.popen.wait(30)
    return int(proc.popen.returncode), proc.log()


def test_sigterm_with_agents_attached_ends_their_streams_cleanly(tmp_path: Path) -> None:
    # the second agent claims a pid it does not hold: the daemon checks no claims here
    daemon = start_daemon(tmp_path / "d", env={"XMON_VERIFY_PIDS": "off"})
    agents = [_agent(daemon.socket_path, pid) for pid in (os.getpid(), os.getppid())]
    try:
        wait_for(lambda: all(a.connected for a in agents), 20, "both agents to attach")
        time.sleep(1.0)  # a few snapshots with the agents attached
        assert daemon.stop() == 0
    finally:
        for agent in agents:
            agent.stop()
    log = daemon.log()
    assert "Traceback" not in log and "CancelledError" not in log, log
    assert "Exception not handled" not in log, log


def _reports(pid: int, sent: dict[int, int]) -> Iterator[bytes]:
    """A job's hello, then a report every 0.1 s whose memory reading is its sequence number
    (KiB in use): ``sent`` holds the last one sent."""
    yield hello(pid)
    for seq in itertools.count(1):
        sent[pid] = seq
        yield report(memory_devices=1, seq=seq, devices=1)
        time.sleep(0.1)


def test_sigterm_writes_every_job_s_last_points_to_tensorboard(tmp_path: Path) -> None:
    """Three jobs report 10 times a second; the daemon writes TensorBoard points every 10 s
    (the default) and is stopped 6 s after the first: each job's last points were lost (the
    last written was ~60 reports old). Now the last snapshot is written as the files close."""
    daemon = start_daemon(
        tmp_path / "d",
        env={"XMON_VERIFY_PIDS": "off", "XMON_PROFILING": json.dumps({"triggers": False})},
    )
    sent: dict[int, int] = {}
    jobs = [RawStream(daemon.socket_path, _reports(7000 + i, sent)) for i in range(3)]
    logdir = Path(daemon.extra_env["XMON_LOGDIR"])
    try:
        wait_for(lambda: len(list(logdir.glob("flood700?-700?/*tfevents*"))) == 3, 30,
                 "the first points")  # fmt: skip
        time.sleep(6.0)
        stopped_at = dict(sent)
        assert daemon.stop(signal.SIGTERM) == 0, daemon.log()
    finally:
        for job in jobs:
            job.close()
    for pid, last_sent in stopped_at.items():
        run = EventAccumulator(str(logdir / f"flood{pid}-{pid}"))
        run.Reload()
        last = run.Scalars("memory/device_0/in_use_bytes")[-1].value // 1024
        # the daemon's last snapshot is at most a period (0.5 s) and a report behind
        assert last >= last_sent - 10, f"job {pid}: last point at report {last} of {last_sent}"


def test_sighup_right_after_start_reloads_instead_of_killing(tmp_path: Path) -> None:
    socket_path = tmp_path / "x.sock"
    proc = spawn(_daemon_cmd(socket_path), tmp_path / "d.log", base_env(XMON_LOGDIR=str(tmp_path)))
    try:
        # As soon as the process catches SIGHUP, which may be before it listens: earlier, the
        # interpreter is still starting and the signal's default action is all there is
        wait_for(lambda: _catches(proc.popen.pid, signal.SIGHUP), 30, "a SIGHUP handler")
        proc.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: "configuration reloaded" in proc.log(), 30, "the early reload")
        assert proc.alive()
    finally:
        assert proc.stop() == 0, proc.log()


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (SigCgt in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_slow_reload_does_not_hold_up_snapshots(tmp_path: Path) -> None:
    config = DaemonConfig(socket_path=tmp_path / "x.sock", logdir=tmp_path / "tb",
                          listen_host="127.0.0.1", listen_port=0, period_seconds=0.2)  # fmt: skip

    def slow_loader() -> tuple[DaemonConfig, list[str]]:
        time.sleep(2.0)  # a config on a slow disk, collectors slow to build
        return config, ["host"]

    async def scenario() -> list[float]:
        daemon = Daemon(config, ["host"], reload_config=slow_loader)
        ticks: list[float] = []
        tick = daemon.tick

        async def counted() -> object:
            ticks.append(time.monotonic())
            return await tick()

        daemon.tick = counted  # type: ignore[method-assign]
        running = asyncio.create_task(daemon.run())
        await asyncio.sleep(0.6)
        daemon.request_reload()
        await asyncio.sleep(3.0)
        assert daemon.reloads.total == 1
        daemon.request_stop()
        await running
        return ticks

    ticks = asyncio.run(scenario())
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) < 1.0, gaps


def test_a_regular_file_or_directory_at_the_socket_path_is_refused(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    code, log = _run_daemon(tmp_path, precious)
    assert code == 1 and precious.read_text() == "keep"
    assert "is not a socket" in log and "Traceback" not in log, log
    code, log = _run_daemon(tmp_path, tmp_path)
    assert code == 1 and "is not a socket" in log and "Traceback" not in log, log


def test_a_deleted_socket_is_made_again(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "d")
    try:
        daemon.socket_path.unlink()
        wait_for(daemon.socket_path.exists, 10, "the daemon to listen again")
        agent = _agent(daemon.socket_path, os.getpid())
        try:
            wait_for(lambda: agent.connected, 20, "an agent to attach over the new socket")
        finally:
            agent.stop()
    finally:
        assert daemon.stop() == 0


def test_a_socket_someone_else_created_is_never_unlinked(tmp_path: Path) -> None:
    """After a deletion, another daemon creates its socket at the path first: the first one's
    SIGTERM must leave it alone."""
    daemon = start_daemon(tmp_path / "d", period=2.0)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        daemon.socket_path.unlink()
        other.bind(str(daemon.socket_path))  # within one period: before the daemon looks
        other.listen()
        wait_for(lambda: "was replaced by another process" in daemon.log(), 10, "the warning")
        assert daemon.stop() == 0
        assert daemon.socket_path.exists(), "the daemon unlinked a socket it did not create"
    finally:
        other.close()
