"""xmon.daemon.peers against real unix sockets: a claimed pid is verified by the connections
its process holds, refuted when it holds none, undecided (and said why) where the kernel or
/proc cannot tell; and the daemon's ingest service acts on each verdict."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from xmon.agent.proof import show_token
from xmon.daemon import peers
from xmon.daemon.hello import PidClaims
from xmon.daemon.hub import Hub
from xmon.daemon.ingest import IngestService
from xmon.daemon.peers import PidVerifier, Verdict
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="peer credentials are Linux's")

# Connects CONNECTIONS times to the socket at argv[1], says so, and holds them until stdin ends.
HOLDER = """
import socket, sys
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
print("ready", flush=True)
sys.stdin.read()
"""
CONNECTIONS = 300


class Listener:
    """A unix socket bound to a private name and linked to its public one, as the daemon's
    (xmon.daemon.lifecycle.SocketGuard), accepting (and keeping) every connection."""

    def __init__(self, directory: Path) -> None:
        self.private = directory / f".xmon.sock.{os.getpid()}"
        self.public = directory / "xmon.sock"
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(self.private))
        self.sock.listen(1024)
        os.link(self.private, self.public)
        self.private.unlink()
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def verifier(self) -> PidVerifier:
        return PidVerifier(lambda: str(self.private))

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    made = Listener(tmp_path)
    yield made
    made.close()


@pytest.fixture
def holder(listener: Listener) -> Iterator[subprocess.Popen[str]]:
    """Another process holding CONNECTIONS connections to the listener."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(listener.public), str(CONNECTIONS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 10
    while len(listener.accepted) < CONNECTIONS and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    proc.communicate(timeout=10)


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.mark.e2e
@linux_only
def test_a_process_holding_a_connection_is_verified_and_others_refuted(
    listener: Listener, holder: subprocess.Popen[str], sleeper: int
) -> None:
    verifier = listener.verifier()
    assert verifier.check(holder.pid).verdict is Verdict.VERIFIED
    refuted = verifier.check(sleeper)
    assert refuted.verdict is Verdict.REFUTED
    assert refuted.reason == f"process {sleeper} holds no connection to this daemon's socket"
    # This process holds the listener and its accepted ends, not a client end.
    assert verifier.check(os.getpid()).verdict is Verdict.REFUTED


@linux_only
def test_a_thread_id_is_not_a_process(listener: Listener) -> None:
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(listener.public))  # this process holds a client end ...
    tid: list[int] = []
    ready, done = threading.Event(), threading.Event()

    def run() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        ready.wait(10)
        verifier = listener.verifier()
        assert verifier.check(os.getpid()).verdict is Verdict.VERIFIED
        check = verifier.check(tid[0])  # ... but a thread's id names no process
        assert check.verdict is Verdict.REFUTED
        assert check.reason == f"pid {tid[0]} is a thread of process {os.getpid()}"
    finally:
        done.set()
        thread.join()
        client.close()


@pytest.mark.e2e
@linux_only
def test_a_pid_with_no_process_is_refuted(listener: Listener) -> None:
    """Every connection's client is known (its credentials), so a pid none of them has is
    no client's: a claim of a pid that no process holds yet cannot wait for its owner."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    check = listener.verifier().check(gone.pid)
    assert check.verdict is Verdict.REFUTED
    assert check.reason == f"process {gone.pid} holds no connection to this daemon's socket"


def _unreadable(*args: object) -> list[peers.Peer]:
    raise peers.Undecided("cannot list /proc/self/fd: Permission denied")


@pytest.mark.e2e
def test_without_its_descriptors_a_claim_cannot_be_decided(
    listener: Listener, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers, "connection_peers", _unreadable)
    check = listener.verifier().check(holder.pid)
    assert check == peers.PidCheck(Verdict.UNKNOWN, "cannot list /proc/self/fd: Permission denied")


@pytest.mark.e2e
@linux_only
def test_checks_are_decided_with_hundreds_of_connections_on_the_socket(
    listener: Listener, holder: subprocess.Popen[str], sleeper: int
) -> None:
    """Verified (a process holding 300 connections) and refuted (one holding none), with 300
    connections accepted, every time: never undecided for want of time. What a check costs:
    benchmarks/pid_checks.py."""
    verifier = listener.verifier()
    for _ in range(10):
        for kind, pid in ((Verdict.VERIFIED, holder.pid), (Verdict.REFUTED, sleeper)):
            check = verifier.check(pid)
            assert check.verdict is kind, check


async def _hello_over_the_service(path: Path, hub: Hub) -> tuple[grpc.StatusCode, list[bool]]:
    """One hello (this process's pid) to a real ingest service on ``path``: its status and the
    attached jobs' ``pid_verified``."""
    server = grpc.aio.server()
    xmon_pb2_grpc.add_IngestServicer_to_server(IngestService(hub), server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    verified: list[bool] = []
    try:
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            call = xmon_pb2_grpc.IngestStub(channel).Connect(timeout=20)
            hello = xmon_pb2.AgentHello(
                protocol_version=1, pid=os.getpid(), job_name="j", proves_process=True
            )
            await call.write(xmon_pb2.AgentMessage(hello=hello))
            try:
                first = await call.read()
                if first is not grpc.aio.EOF and first.HasField("prove"):
                    # The proof the real agent gives (xmon.agent.proof), from this thread.
                    restore = show_token(first.prove.token)
                    assert restore is not None
                    shown = xmon_pb2.ProcessShown(token=first.prove.token)
                    await call.write(xmon_pb2.AgentMessage(shown=shown))
                    first = await call.read()
                    restore()
            except grpc.aio.AioRpcError as exc:
                return exc.code(), verified
            assert first is not grpc.aio.EOF and first.HasField("welcome")
            verified = [job.pid_verified for job in hub.jobs.values()]
            call.cancel()
            code = grpc.StatusCode.OK
    finally:
        await server.stop(None)
    return code, verified


@linux_only
@pytest.mark.parametrize(
    ("readable", "policy", "expected"),
    [
        (True, "prefer", (grpc.StatusCode.OK, [True])),
        (False, "prefer", (grpc.StatusCode.OK, [False])),  # accepted, marked unverified
        (False, "require", (grpc.StatusCode.PERMISSION_DENIED, [])),
        (False, "off", (grpc.StatusCode.OK, [False])),
    ],
)
def test_the_ingest_service_acts_on_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readable: bool, policy: str,
    expected: tuple[grpc.StatusCode, list[bool]],
) -> None:  # fmt: skip
    if not readable:
        monkeypatch.setattr(peers, "connection_peers", _unreadable)
    path = tmp_path / "xmon.sock"
    hub = Hub(period_seconds=1.0)
    hub.pid_claims = PidClaims(policy, PidVerifier(lambda: str(path)))
    assert asyncio.run(_hello_over_the_service(path, hub)) == expected
    refused = hub.budget.refused.get("pid_claims", 0)
    assert refused == (1 if expected[0] is grpc.StatusCode.PERMISSION_DENIED else 0)
