"""The floor under the daemon's fan-in cost: a grpc.aio server that only reads agent streams.

Serves xmon's Ingest service on a unix socket, answers each hello with a welcome and then
reads and counts every message, doing nothing with it. Run beside the real daemon under the
same load, its CPU is what gRPC's Python server alone costs per report; the daemon's CPU above
it is xmon's own work (applying reports, building snapshots).

    python benchmarks/grpc_floor.py SOCKET
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import grpc

from xmon.proto import xmon_pb2, xmon_pb2_grpc

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


async def serve(socket: str) -> None:
    server = grpc.aio.server()
    xmon_pb2_grpc.add_IngestServicer_to_server(ReadOnlyIngest(), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
