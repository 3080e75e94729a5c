"""A fake JAX job on a GPU or TPU: the agent's real transport, reports with PJRT allocator stats.

The CPU backend has no allocator (``jax.Device.memory_stats()`` is None there), so a real CPU
job never sends the stats behind the peak, limit, fragmentation, largest-free-block and
allocation-rate series. This stands in for a job whose PJRT client has one (GPU's BFC allocator,
TPU's HBM allocator): it connects to a daemon's socket with the agent's own
:class:`~xmon.agent.transport.Transport` (same stream, hello, backoff and drop rules) and sends an
``AgentHello`` with its devices, then one ``AgentReport`` per period whose ``memory`` carries,
per device, every key XLA's ``PyDevice::MemoryStats`` copies out of ``tsl::AllocatorStats``
(:data:`ALLOCATOR_KEYS`). It never imports jax.

The numbers are made up but shaped like a job that preallocated its share and runs close to it:
``bytes_in_use`` moves between 96% and 97.75% of ``bytes_limit`` from one report to the next (a
step's buffers come and go), ``num_allocs`` only grows, and the largest free block is part of
what is free, so fragmentation is between 0 and 1. Commands from the daemon (captures, HLO) are
answered as failed: there is no runtime behind this job to trace.

Run it by hand to give a daemon a job with allocator stats:
``PYTHONPATH=. python tests/support/fakes/pjrt_job.py --socket /tmp/xmon-$UID/xmon.sock``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path

from xmon import __version__
from xmon.agent.transport import Outgoing, Transport
from xmon.wire import paths
from xmon.wire.proto import xmon_pb2

GIB = 1024**3
MIB = 1024**2
# Every key a GPU or TPU PJRT client can put in memory_stats(). Four are optional in
# tsl::AllocatorStats (bytes_limit, bytes_reservable_limit, pool_bytes, peak_pool_bytes) and left
# out by an allocator that does not track them; the fake sends them all so every series has data.
ALLOCATOR_KEYS = (
    "num_allocs", "bytes_in_use", "peak_bytes_in_use", "largest_alloc_size", "bytes_limit",
    "bytes_reserved", "peak_bytes_reserved", "bytes_reservable_limit",
    "largest_free_block_bytes", "pool_bytes", "peak_pool_bytes",
)  # fmt: skip
# A v5e chip's 16 GiB of HBM less what the runtime keeps for itself: what bytes_limit looks like.
V5E_BYTES_LIMIT = 16 * GIB - 256 * MIB
IN_USE_LOW, IN_USE_STEP, IN_USE_STEPS = 0.96, 0.0025, 8  # bytes_in_use / bytes_limit, per report
LARGEST_FREE_SHARE = 0.6  # of the free bytes: fragmentation 0.4
ALLOCS_PER_REPORT = 120


def allocator_stats(tick: int, device: int, bytes_limit: int = V5E_BYTES_LIMIT) -> dict[str, int]:
    """``memory_stats()`` of one device at the ``tick``-th report, every key of it.

    Bytes in use, the largest free block and the allocation count change from tick to tick;
    devices are out of phase with each other so that per-device panels show distinct lines.
    The peaks are those of a job already past its first full cycle.
    """
    in_use = int(bytes_limit * (IN_USE_LOW + IN_USE_STEP * ((tick + device) % IN_USE_STEPS)))
    peak = int(bytes_limit * (IN_USE_LOW + IN_USE_STEP * (IN_USE_STEPS - 1)))
    reserved = 64 * MIB
    return {
        "num_allocs": 10_000 + ALLOCS_PER_REPORT * tick + device,
        "bytes_in_use": in_use,
        "peak_bytes_in_use": peak,
        "largest_alloc_size": 512 * MIB,
        "bytes_limit": bytes_limit,
        "bytes_reserved": reserved,
        "peak_bytes_reserved": reserved,
        "bytes_reservable_limit": bytes_limit,
        "largest_free_block_bytes": int((bytes_limit - in_use) * LARGEST_FREE_SHARE),
        "pool_bytes": bytes_limit,  # the preallocated pool the allocator hands buffers out of
        "peak_pool_bytes": bytes_limit,
    }


class FakePjrtJob:
    """A job with ``devices`` accelerator devices of one kind, reporting every ``period`` s."""

    def __init__(
        self,
        socket_path: Path,
        job_name: str = "pjrt-fake",
        devices: int = 4,
        platform: str = "tpu",
        device_kind: str = "TPU v5 lite",
        bytes_limit: int = V5E_BYTES_LIMIT,
        period: float = 0.5,
    ) -> None:
        self.job_name = job_name
        self.platform = platform
        self.bytes_limit = bytes_limit
        self.period = period
        self.started_at = time.time()
        self.devices = [_device(i, platform, device_kind) for i in range(devices)]
        self.transport = Transport(paths.grpc_target(socket_path), self._hello, self._refuse)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-pjrt-job", daemon=True)
        self._seq = 0

    def start(self) -> FakePjrtJob:
        self.transport.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.period + 1.0)
        self.transport.stop()

    def report(self) -> xmon_pb2.AgentMessage:
        """The next report: allocator stats of every device at this tick."""
        self._seq += 1
        tick = self._seq - 1
        memory = [
            xmon_pb2.DeviceMemorySample(
                device_id=d.id, stats=allocator_stats(tick, d.id, self.bytes_limit)
            )
            for d in self.devices
        ]
        counters = self.transport.counters
        report = xmon_pb2.AgentReport(
            seq=self._seq,
            wall_time=time.time(),
            memory=memory,
            agent=xmon_pb2.AgentCounters(
                reports_sent_total=counters.reports_sent,
                reports_dropped_total=counters.reports_dropped,
                reconnects_total=counters.reconnects,
            ),
            platform=self.platform,
        )
        return xmon_pb2.AgentMessage(report=report)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            if self.transport.connected:
                self.transport.offer(Outgoing(self.report()))

    def _hello(self) -> xmon_pb2.AgentMessage:
        # The devices go in the hello, as the agent sends them once the backend is up.
        hello = xmon_pb2.AgentHello(
            protocol_version=xmon_pb2.PROTOCOL_VERSION,
            job_name=self.job_name,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            platform=self.platform,
            process_count=1,
            argv=sys.argv[:32],
            started_at=self.started_at,
            devices=self.devices,
            agent_version=__version__,
        )
        return xmon_pb2.AgentMessage(hello=hello)

    def _refuse(self, command: xmon_pb2.DaemonCommand) -> None:
        # Answer rather than ignore, so a capture aimed at this job fails at once, not by timeout.
        result = xmon_pb2.CommandResult(
            command_id=command.command_id,
            ok=False,
            message="a fake PJRT job has no runtime to trace or dump",
            error_code="failed",
        )
        self.transport.offer(Outgoing(xmon_pb2.AgentMessage(result=result)))


def _device(index: int, platform: str, device_kind: str) -> xmon_pb2.DeviceInfo:
    info = xmon_pb2.DeviceInfo(
        id=index, platform=platform, device_kind=device_kind, local_hardware_id=index
    )
    if platform == "tpu":  # chips of a 2-wide slice, one TensorCore each, as v5e has
        info.coords.extend([index % 2, index // 2, 0])
        info.core_on_chip = 0
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", type=Path, default=paths.default_socket_path())
    parser.add_argument("--job-name", default="pjrt-fake")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--platform", default="tpu", help="tpu or gpu")
    parser.add_argument("--device-kind", default="TPU v5 lite")
    parser.add_argument("--bytes-limit", type=int, default=V5E_BYTES_LIMIT)
    parser.add_argument("--period", type=float, default=1.0)
    args = parser.parse_args()
    job = FakePjrtJob(args.socket, args.job_name, args.devices, args.platform,
                      args.device_kind, args.bytes_limit, args.period).start()  # fmt: skip
    print(f"fake PJRT job {args.job_name!r} (pid {os.getpid()}) reporting to {args.socket}")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        job.stop()


if __name__ == "__main__":
    main()
