"""Many agents in one process: xmon's real agent transport sending realistic reports.

Real JAX jobs cost ~300 MB and a core each, so fan-in is driven by this generator instead: each
simulated agent is the agent's own ``Transport`` (same gRPC stream, queue and reconnect logic)
sending reports shaped like a 4-device job's. Prints one JSON line with what was sent.

    python benchmarks/loadgen.py SOCKET AGENTS RATE_HZ SECONDS
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable

from xmon.agent.transport import Outgoing, Transport
from xmon.wire import paths
from xmon.wire.proto import xmon_pb2

FIRST_PID = 4_000_000  # below Linux's largest pid (4,194,304); the daemon must not check claims


def free_pids(count: int) -> list[int]:
    """Pids no process on this host has, to claim: the daemon refuses a claim of a live process
    that holds no connection, and accepts one it cannot check, unverified."""
    pids: list[int] = []
    pid = FIRST_PID
    while len(pids) < count:
        if not os.path.exists(f"/proc/{pid}"):
            pids.append(pid)
        pid += 1
    return pids


def hello(index: int, pid: int) -> xmon_pb2.AgentMessage:
    devices = [xmon_pb2.DeviceInfo(id=d, platform="cpu", device_kind="cpu") for d in range(4)]
    return xmon_pb2.AgentMessage(
        hello=xmon_pb2.AgentHello(
            protocol_version=xmon_pb2.PROTOCOL_VERSION,
            job_name=f"load{index}",
            pid=pid,
            hostname="loadgen",
            platform="cpu",
            jax_version="0",
            jaxlib_version="0",
            devices=devices,
        )
    )


def report(seq: int, steps: int) -> xmon_pb2.AgentMessage:
    memory = [
        xmon_pb2.DeviceMemorySample(
            device_id=d, stats={"bytes_in_use": 2**20 * seq, "bytes_limit": 2**34}
        )
        for d in range(4)
    ]
    programs = [
        xmon_pb2.ProgramInfo(fingerprint=f"{p:032x}", name=f"jit_f{p}", flops=1e9, num_devices=4)
        for p in range(5 if seq == 1 else 0)
    ]
    return xmon_pb2.AgentMessage(
        report=xmon_pb2.AgentReport(
            seq=seq,
            wall_time=time.time(),
            memory=memory,
            programs=programs,
            compile=xmon_pb2.CompileCounters(compiles_total=5),
            steps=xmon_pb2.StepCounters(
                steps_total=steps, step_seconds_total=steps * 0.01, recent_step_seconds=[0.01] * 10
            ),
            platform="cpu",
        )
    )


def _all(transports: list[Transport], action: Callable[[Transport], object]) -> None:
    threads = [threading.Thread(target=action, args=(t,)) for t in transports]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run(socket: str, agents: int, rate: float, seconds: float) -> dict[str, int]:
    target = paths.grpc_target(paths.Path(socket))
    transports = [
        Transport(target, lambda i=i, pid=pid: hello(i, pid), lambda c: None)
        for i, pid in enumerate(free_pids(agents))
    ]
    for transport in transports:
        transport.start()
    deadline = time.monotonic() + 10
    while not all(t.connected for t in transports) and time.monotonic() < deadline:
        time.sleep(0.05)
    offered = 0
    period = 1.0 / rate
    next_tick = time.monotonic()
    end = next_tick + seconds
    seq = 0
    while next_tick < end:
        seq += 1
        for transport in transports:
            transport.offer(Outgoing(report(seq, seq * 10)))
            offered += 1
        next_tick += period
        threading.Event().wait(max(0.0, next_tick - time.monotonic()))
    # Flush and stop all at once: each waits (bounded) for its own stream to drain and close.
    _all(transports, lambda t: t.flush(2.0))
    sent = sum(t.counters.reports_sent for t in transports)
    dropped = sum(t.counters.reports_dropped for t in transports)
    _all(transports, lambda t: t.stop())
    return {"offered": offered, "sent": sent, "dropped": dropped, "pid": os.getpid()}


if __name__ == "__main__":
    socket, agents, rate, seconds = (
        sys.argv[1],
        int(sys.argv[2]),
        float(sys.argv[3]),
        float(sys.argv[4]),
    )
    print(json.dumps(run(socket, agents, rate, seconds)), flush=True)
