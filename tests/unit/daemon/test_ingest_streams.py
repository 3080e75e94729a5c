"""The agent stream's writer (xmon.daemon.intake.ingest): what it leaves behind when gRPC ends
it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from xmon.daemon.intake.ingest import _ask_sample_length, _write_commands
from xmon.daemon.intake.links import AgentLink
from xmon.execution.ledger import JobLedger
from xmon.wire.proto import xmon_pb2


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


def test_the_sample_length_is_told_once_each_time_it_changes() -> None:
    """At least (lengthened for long steps) and at most (shortened after a refusal for size)
    go in one SampleLength, sent when either changed."""

    async def run() -> list[xmon_pb2.SampleLength]:
        link, ledger = AgentLink(), JobLedger()
        state = SimpleNamespace(ledger=ledger, sample_seconds_told=None)
        _ask_sample_length(state, link)  # type: ignore[arg-type]  # nothing asked yet
        ledger.refused_as_too_large(0.4)
        _ask_sample_length(state, link)  # type: ignore[arg-type]
        _ask_sample_length(state, link)  # type: ignore[arg-type]  # unchanged: not again
        ledger.sample_seconds_wanted = 3.0
        _ask_sample_length(state, link)  # type: ignore[arg-type]
        told = []
        while not link.outbox.empty():
            told.append(link.outbox.get_nowait().command.sample_length)
        return told

    told = asyncio.run(run())
    assert [(t.seconds, t.max_seconds) for t in told] == [(0.0, 0.2), (3.0, 0.2)]
