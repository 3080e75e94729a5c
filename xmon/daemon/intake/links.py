"""The daemon's side of one agent stream: commands down, their results back.

Each agent stream has an outbox (written to the stream by the stream's own coroutine, so gRPC
sees one writer) and a table of commands awaiting a ``CommandResult``. When the stream ends,
every waiting command fails with :class:`AgentGone` instead of waiting for ever.

The rest of the daemon speaks to an agent in the commands below and reads its ``Answer``; they
become the wire's ``DaemonCommand`` and come from its ``CommandResult`` here, at the intake.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from xmon.wire.proto import xmon_pb2

OUTBOX_SIZE = 16


@dataclass(frozen=True)
class StartTrace:
    """Record a profiler trace of ``duration_ms`` into ``log_dir``; the agent writes
    ``annotation_json`` next to it (who asked, and why)."""

    duration_ms: int
    log_dir: str
    annotation_json: str


@dataclass(frozen=True)
class SaveMemoryProfile:
    """Save a device memory profile at ``path``, with ``annotation_json`` beside it."""

    path: str
    annotation_json: str


@dataclass(frozen=True)
class GetHlo:
    """Send the optimized HLO text of the program with this fingerprint."""

    fingerprint: str


@dataclass(frozen=True)
class SampleLength:
    """Record execution samples of at least ``seconds`` (0: as configured) and, beyond whole
    steps, at most ``max_seconds`` (0: no such limit)."""

    seconds: float
    max_seconds: float


Command = StartTrace | SaveMemoryProfile | GetHlo | SampleLength


@dataclass(frozen=True)
class Answer:
    """An agent's answer to a command (``CommandResult``)."""

    ok: bool
    message: str = ""
    paths: tuple[str, ...] = ()
    error_code: str = ""  # "" when ok, else busy | not_writable | no_space | invalid | ...
    hlo_gzip: bytes = b""
    traced_seconds: float = 0.0  # how long the profiler recorded (0: not measured)


class AgentGone(ConnectionError):
    """The agent's stream ended before it answered."""


class LinkBusy(RuntimeError):
    """The agent has too many commands queued (it is not reading its stream)."""


class AgentLink:
    """Commands to one agent (asyncio loop only)."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[xmon_pb2.DaemonMessage] = asyncio.Queue(OUTBOX_SIZE)
        self._pending: dict[int, asyncio.Future[Answer]] = {}
        self._ids = itertools.count(1)
        self.closed = False
        # Set when the daemon stops: the stream then ends cleanly (status OK) instead of being
        # cancelled by the server's shutdown, which gRPC logs as an unhandled exception.
        self.ending = asyncio.Event()

    def send(self, command: Command) -> tuple[int, asyncio.Future[Answer]]:
        """Queue a command; its id (for ``forget``) and a future that resolves with its
        answer."""
        if self.closed:
            raise AgentGone("the job's agent is not connected any more")
        command_id = next(self._ids)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        try:
            self.outbox.put_nowait(_message(command, command_id))
        except asyncio.QueueFull:
            raise LinkBusy("the job's agent is not taking commands (outbox full)") from None
        self._pending[command_id] = future
        return command_id, future

    def tell(self, command: Command) -> bool:
        """Queue a command that has no result (a setting); False where the outbox is full or
        the stream is gone (the next report tries again)."""
        if self.closed:
            return False
        try:
            self.outbox.put_nowait(_message(command, 0))
        except asyncio.QueueFull:
            return False
        return True

    def resolve(self, result: xmon_pb2.CommandResult) -> bool:
        """Hand a result to its waiting command; False if nobody waits (late or unknown)."""
        future = self._pending.pop(result.command_id, None)
        if future is None or future.done():
            return False
        future.set_result(_answer(result))
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


def _message(command: Command, command_id: int) -> xmon_pb2.DaemonMessage:
    """``command`` as the wire's ``DaemonCommand`` (``command_id`` 0: no result awaited)."""
    match command:
        case StartTrace():
            wire = xmon_pb2.DaemonCommand(
                start_trace=xmon_pb2.StartTrace(
                    duration_ms=command.duration_ms,
                    log_dir=command.log_dir,
                    annotation_json=command.annotation_json,
                )
            )
        case SaveMemoryProfile():
            wire = xmon_pb2.DaemonCommand(
                save_memory_profile=xmon_pb2.SaveMemoryProfile(
                    path=command.path, annotation_json=command.annotation_json
                )
            )
        case GetHlo():
            wire = xmon_pb2.DaemonCommand(get_hlo=xmon_pb2.GetHlo(fingerprint=command.fingerprint))
        case SampleLength():
            wire = xmon_pb2.DaemonCommand(
                sample_length=xmon_pb2.SampleLength(
                    seconds=command.seconds, max_seconds=command.max_seconds
                )
            )
    wire.command_id = command_id
    return xmon_pb2.DaemonMessage(command=wire)


def _answer(result: xmon_pb2.CommandResult) -> Answer:
    return Answer(
        ok=result.ok,
        message=result.message,
        paths=tuple(result.paths),
        error_code=result.error_code,
        hlo_gzip=result.hlo_gzip,
        traced_seconds=result.traced_seconds,
    )
