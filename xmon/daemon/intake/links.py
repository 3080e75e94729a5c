"""The daemon's side of one agent stream: commands down, their results back.

Each agent stream has an outbox (written to the stream by the stream's own coroutine, so gRPC
sees one writer) and a table of commands awaiting a ``CommandResult``. When the stream ends,
every waiting command fails with :class:`AgentGone` instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
import itertools

from xmon.wire.proto import xmon_pb2

OUTBOX_SIZE = 16


class AgentGone(ConnectionError):
    """The agent's stream ended before it answered."""


class LinkBusy(RuntimeError):
    """The agent has too many commands queued (it is not reading its stream)."""


class AgentLink:
    """Commands to one agent (asyncio loop only)."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[xmon_pb2.DaemonMessage] = asyncio.Queue(OUTBOX_SIZE)
        self._pending: dict[int, asyncio.Future[xmon_pb2.CommandResult]] = {}
        self._ids = itertools.count(1)
        self.closed = False
        # Set when the daemon stops: the stream then ends cleanly (status OK) instead of being
        # cancelled by the server's shutdown, which gRPC logs as an unhandled exception.
        self.ending = asyncio.Event()

    def send(self, command: xmon_pb2.DaemonCommand) -> asyncio.Future[xmon_pb2.CommandResult]:
        """Queue a command (its id is assigned here); the future resolves with its result."""
        if self.closed:
            raise AgentGone("the job's agent is not connected any more")
        command.command_id = next(self._ids)
        future: asyncio.Future[xmon_pb2.CommandResult] = asyncio.get_running_loop().create_future()
        try:
            self.outbox.put_nowait(xmon_pb2.DaemonMessage(command=command))
        except asyncio.QueueFull:
            raise LinkBusy("the job's agent is not taking commands (outbox full)") from None
        self._pending[command.command_id] = future
        return future

    def tell(self, command: xmon_pb2.DaemonCommand) -> bool:
        """Queue a command that has no result (a setting); False where the outbox is full or
        the stream is gone (the next report tries again)."""
        if self.closed:
            return False
        try:
            self.outbox.put_nowait(xmon_pb2.DaemonMessage(command=command))
        except asyncio.QueueFull:
            return False
        return True

    def resolve(self, result: xmon_pb2.CommandResult) -> bool:
        """Hand a result to its waiting command; False if nobody waits (late or unknown)."""
        future = self._pending.pop(result.command_id, None)
        if future is None or future.done():
            return False
        future.set_result(result)
        return True

    def forget(self, command_id: int) -> None:
        """The caller stopped waiting (timeout): a late result is then dropped."""
        self._pending.pop(command_id, None)

    def close(self, reason: str) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(AgentGone(reason))

    @property
    def waiting(self) -> int:
        return len(self._pending)
