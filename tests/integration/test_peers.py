"""xmon.daemon.peers against real unix sockets: a claimed pid is verified by the connections
its process holds, refuted when it holds none, undecided (and said why) where the kernel or
/proc cannot tell; and the daemon's ingest service acts on each verdict."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from xmon.agent.proof import show_token
from xmon.daemon import peers
from xmon.daemon.hub import Hub
from xmon.daemon.intake.hello import PidClaims
from xmon.daemon.intake.ingest import IngestService
from xmon.daemon.peers import PidVerifier, Verdict
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

from support.peer_listener import Listener

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="peer credentials are Linux's")


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    made = Listener(tmp_path)
    yield made
    made.close()


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


def _unreadable(*args: object) -> list[peers.Peer]:
    raise peers.Undecided("cannot list /proc/self/fd: Permission denied")


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
