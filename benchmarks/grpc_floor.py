"""The floor under the daemon's cost: the daemon's libraries, doing none of xmon's work.

Serves xmon's Ingest service on a unix socket, answers each hello with a welcome and then
reads and counts every message, doing nothing with it. Run beside the real daemon under the
same load, its CPU is what gRPC's Python server alone costs per report; the daemon's CPU above
it is xmon's own work (applying reports, building snapshots).

With ``--libraries``, it also holds what the daemon holds apart from its own code:
prometheus_client, psutil and the libtpu stubs imported, an HTTP server in a thread blocked in
accept, and, given a libtpu address, a gRPC client channel that has listed its metrics once.
Its memory is then the floor under the daemon's RSS: what Python and these libraries cost
before xmon keeps anything.

    python benchmarks/grpc_floor.py SOCKET [--libraries [TPU_ADDRESS]]
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

WELCOME = xmon_pb2.DaemonMessage(
    welcome=xmon_pb2.Welcome(protocol_version=xmon_pb2.PROTOCOL_VERSION, period_seconds=1.0)
)


class ReadOnlyIngest(xmon_pb2_grpc.IngestServicer):
    def __init__(self) -> None:
        self.messages = 0

    async def Connect(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[xmon_pb2.AgentMessage],
        context: grpc.aio.ServicerContext,
    ) -> None:
        await context.read()  # the hello
        await context.write(WELCOME)
        while await context.read() is not grpc.aio.EOF:
            self.messages += 1


def hold_libraries(tpu_address: str | None) -> list[object]:
    """Load and start what the daemon runs beside its own code; the returned objects stay."""
    import prometheus_client
    import psutil
    from tpu_info.proto import tpu_metric_service_pb2 as pb
    from tpu_info.proto import tpu_metric_service_pb2_grpc as pb_grpc

    prometheus_client.generate_latest(prometheus_client.CollectorRegistry())
    psutil.cpu_times()
    http = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    held: list[object] = [http]
    if tpu_address is not None:
        local = grpc.LocalConnectionType
        kind = local.UDS if tpu_address.startswith("unix:") else local.LOCAL_TCP
        credentials = grpc.local_channel_credentials(kind)
        channel = grpc.secure_channel(tpu_address, credentials)
        stub = pb_grpc.RuntimeMetricServiceStub(channel)
        stub.ListSupportedMetrics(pb.ListSupportedMetricsRequest(), timeout=10)
        held.append(channel)
    return held


async def serve(socket: str) -> None:
    server = grpc.aio.server()
    xmon_pb2_grpc.add_IngestServicer_to_server(ReadOnlyIngest(), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    from xmon.daemon import memory

    memory.limit_arenas()  # as the daemon does, so the floor differs from it by xmon's work
    libraries = "--libraries" in sys.argv[2:3]
    held = hold_libraries(sys.argv[3] if len(sys.argv) > 3 else None) if libraries else []
    asyncio.run(serve(sys.argv[1]))
