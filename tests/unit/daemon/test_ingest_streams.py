"""The agent stream's writer (xmon.daemon.ingest): what it leaves behind when gRPC ends it."""

from __future__ import annotations

import asyncio
from typing import Any

from xmon.daemon.ingest import _write_commands
from xmon.daemon.links import AgentLink


def test_a_stream_cancelled_by_grpc_leaves_no_task_waiting_for_commands() -> None:
    """gRPC cancels the handler when a job's stream ends. The writer's wait for the next
    command was left pending on the dropped link's queue, and destroyed pending later ("Task
    was destroyed but it is pending!" in the daemon's log after ordinary job exits, with a view
    attached)."""

    async def run() -> set[asyncio.Task[Any]]:
        link = AgentLink()
        reader = asyncio.create_task(asyncio.sleep(3600))
        writer = asyncio.create_task(_write_commands(None, link, reader))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)  # the writer waits for a command
        writer.cancel()  # as gRPC does when the stream ends
        await asyncio.gather(writer, return_exceptions=True)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await asyncio.sleep(0)  # let cancelled tasks finish
        return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    assert asyncio.run(run()) == set()
