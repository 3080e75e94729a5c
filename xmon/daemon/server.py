"""gRPC services on the daemon's unix socket: agent ingest and the views' control API.

Everything here runs on the daemon's asyncio loop (grpc.aio), so one thread serves any number
of agent streams; state is only touched from that loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from xmon import __version__
from xmon.daemon.bounds import StateBudget
from xmon.daemon.hello import PidClaims, hello_refusal
from xmon.daemon.jobs import JobState, clean_label
from xmon.daemon.ledger_reader import LedgerReader
from xmon.daemon.links import AgentLink
from xmon.daemon.peers import PidCheck, Verdict
from xmon.daemon.sanitize import scrub
from xmon.daemon.snapshot_encoding import SnapshotEncoder
from xmon.model import Job, Snapshot
from xmon.proto import xmon_pb2, xmon_pb2_grpc

if TYPE_CHECKING:
    from xmon.daemon.capture import Profiler

log = logging.getLogger("xmon.daemon")

SUPPORTED_PROTOCOLS = frozenset({1})
HELLO_TIMEOUT_SECONDS = 10.0
FRESH_TIMEOUT_FACTOR = 3  # periods a GetSnapshot(fresh=True) waits, plus 5 s of collectors
SUBSCRIBER_BUFFER = 2


@dataclass
class IngestCounters:
    reports_received: int = 0
    reports_rejected: int = 0
    disconnects: int = 0


@dataclass
class Hub:
    """State shared by the services and the snapshot loop (asyncio loop only)."""

    period_seconds: float
    max_agents: int = 1024
    max_connections: int = 4096  # open streams (agents and views); see xmon.daemon.bounds
    max_subscribers: int = 64
    subscriber_stall_seconds: float = 10.0  # a view that takes no snapshot this long is cut off
    hello_timeout_seconds: float = HELLO_TIMEOUT_SECONDS
    max_message_bytes: int = 16 * 1024 * 1024  # largest snapshot message sent to a view
    budget: StateBudget = field(default_factory=StateBudget)
    pid_claims: PidClaims = field(default_factory=PidClaims)  # verify_pids
    streams: int = 0  # open streams of both services
    streams_closed: int = 0  # streams of both services that have ended
    jobs: dict[int, JobState] = field(default_factory=dict)
    counters: IngestCounters = field(default_factory=IngestCounters)
    snapshot: Snapshot | None = None
    _message: xmon_pb2.SnapshotMessage | None = None  # snapshot's encoding, made on demand
    encoder: SnapshotEncoder = field(default_factory=SnapshotEncoder)  # one for every view
    subscribers: set[asyncio.Queue[xmon_pb2.SnapshotMessage]] = field(default_factory=set)
    links: dict[int, AgentLink] = field(default_factory=dict)  # stream id -> command channel
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    collects_started: int = 0  # snapshots whose collection has begun
    # (collects_started when asked, future) of each GetSnapshot(fresh=True) waiting
    fresh_waiters: list[tuple[int, asyncio.Future[xmon_pb2.SnapshotMessage]]] = field(
        default_factory=list
    )
    ledger_reader: LedgerReader = field(default_factory=LedgerReader)
    # (job name, pid, host, report) of a job that ran out of memory (xmon.daemon.oom.OomSink)
    oom_sink: Callable[[str, int, str, xmon_pb2.OomReport], None] | None = None

    def __post_init__(self) -> None:
        self.ledger_reader.refused = self.budget.refused  # one table of refusals

    def next_id(self) -> int:
        return next(self._ids)

    def end_streams(self) -> None:
        """The daemon is stopping: end every agent stream cleanly (see ``AgentLink.ending``)."""
        for link in self.links.values():
            link.ending.set()

    def drop_job(self, stream_id: int) -> JobState | None:
        """Forget a job; its memory no longer counts against the daemon's bound."""
        state = self.jobs.pop(stream_id, None)
        if state is not None:
            state.release()
        return state

    def open_stream(self) -> bool:
        """Count a new stream; False (and counted as refused) past ``max_connections``."""
        if self.streams >= self.max_connections:
            self.budget.refuse("connections")
            return False
        self.streams += 1
        return True

    def close_stream(self) -> None:
        self.streams -= 1
        self.streams_closed += 1

    def begin_collect(self) -> int:
        """Number the snapshot whose collection starts now (see ``publish``)."""
        self.collects_started += 1
        return self.collects_started

    def publish(self, snapshot: Snapshot, collect: int | None = None) -> None:
        """Hand a snapshot to the views. It is encoded only if a view wants it: an idle daemon
        with no view attached does not pay for JSON every period. ``collect`` (from
        ``begin_collect``) answers the fresh-snapshot requests made before it began."""
        self.snapshot, self._message = snapshot, None
        if not self.subscribers and not (collect is not None and self.fresh_waiters):
            self.encoder.forget()  # no view reads: keep no encoded programs either
            return
        message = self.latest()
        assert message is not None  # a snapshot was just set
        if collect is not None:
            waiting = []
            for asked, future in self.fresh_waiters:
                if future.done():
                    continue
                if asked < collect:
                    future.set_result(message)
                else:
                    waiting.append((asked, future))
            self.fresh_waiters = waiting
        for queue in self.subscribers:
            if queue.full():  # a slow view skips frames instead of growing memory
                queue.get_nowait()
            queue.put_nowait(message)

    def latest(self) -> xmon_pb2.SnapshotMessage | None:
        if self._message is None and self.snapshot is not None:
            self._message, left_out = fitting_snapshot(
                self.snapshot, self.max_message_bytes, self.encoder
            )
            self.budget.refuse("snapshot_programs", left_out)
        return self._message


def fitting_snapshot(
    snapshot: Snapshot, max_bytes: int, encoder: SnapshotEncoder | None = None
) -> tuple[xmon_pb2.SnapshotMessage, int]:
    """The encoded snapshot, with fewer programs per job until it fits in ``max_bytes`` (a
    view could not receive it otherwise); also how many programs were left out."""
    encoder = encoder or SnapshotEncoder()
    message = encoder.encode(snapshot)
    keep = max((len(job.programs) for job in snapshot.jobs), default=0)
    while message.ByteSize() > max_bytes and keep > 0:
        keep //= 2
        jobs = tuple(_with_programs(job, keep) for job in snapshot.jobs)
        message = encoder.encode(dataclasses.replace(snapshot, jobs=jobs), remember=False)
    return message, sum(max(0, len(job.programs) - keep) for job in snapshot.jobs)


def _with_programs(job: Job, keep: int) -> Job:
    """The job with only its ``keep`` most recently compiled programs."""
    if len(job.programs) <= keep:
        return job
    return dataclasses.replace(job, programs=job.programs[len(job.programs) - keep :])


class IngestService(xmon_pb2_grpc.IngestServicer):
    def __init__(self, hub: Hub) -> None:
        self._hub = hub

    async def Connect(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[xmon_pb2.AgentMessage],
        context: grpc.aio.ServicerContext,
    ) -> None:
        if not self._hub.open_stream():
            await _refuse_connection(context, self._hub.max_connections)
            return
        try:
            await self._serve_agent(context)
        finally:
            self._hub.close_stream()

    async def _serve_agent(self, context: grpc.aio.ServicerContext) -> None:
        hello = await self._read_hello(context)
        if hello is None:
            return
        hub = self._hub
        check, refusal = await self._judge_hello(hello)
        if refusal is not None:
            hub.counters.reports_rejected += 1
            log.warning("agent refused: job %r: %s", clean_label(hello.job_name), refusal[1])
            await context.abort(*refusal)
            return
        if len(hub.jobs) >= hub.max_agents:
            hub.counters.reports_rejected += 1
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this daemon already serves {hub.max_agents} agents (max_agents)",
            )
            return
        stream_id = hub.next_id()
        job = hub.jobs[stream_id] = JobState(
            hello=hello,
            connected_at=time.time(),
            budget=hub.budget,
            pid_verified=check.verdict is Verdict.VERIFIED,
        )
        del hello  # the message, with any padding it carried, goes: the job keeps a slim copy
        link = hub.links[stream_id] = AgentLink()
        log.info("agent attached: job %r pid %d (%s)", job.job_name, job.pid,
                 "verified" if job.pid_verified else f"unverified: {check.reason}")  # fmt: skip
        reader: asyncio.Task[None] | None = None
        try:
            welcome = xmon_pb2.Welcome(
                protocol_version=xmon_pb2.PROTOCOL_VERSION,
                daemon_version=__version__,
                period_seconds=hub.period_seconds,
            )
            await context.write(xmon_pb2.DaemonMessage(welcome=welcome))
            # One task reads reports and results; this coroutine is the stream's only writer.
            reader = asyncio.create_task(self._read_reports(context, stream_id, link))
            await _write_commands(context, link, reader)
        finally:
            _finish_reader(reader)
            link.close("the job's agent disconnected")
            if hub.links.get(stream_id) is link:
                del hub.links[stream_id]
            state = hub.drop_job(stream_id)
            hub.counters.disconnects += 1
            if state is not None:
                log.info("agent detached: job %r pid %d", state.job_name, state.pid)

    async def _judge_hello(
        self, hello: xmon_pb2.AgentHello
    ) -> tuple[PidCheck, tuple[grpc.StatusCode, str] | None]:
        """The verdict on the pid the hello claims, and why the hello is refused (or None)."""
        hub = self._hub
        unchecked = PidCheck(Verdict.UNKNOWN, "not checked")
        refusal = hello_refusal(hello, (state.pid for state in hub.jobs.values()))
        if refusal is not None:
            return unchecked, refusal
        check = await hub.pid_claims.check(hello.pid)
        refusal = hub.pid_claims.refusal(hello.pid, check)
        if refusal is not None:
            hub.budget.refuse("pid_claims")
            return check, refusal
        # Other hellos were served during the check: the pid may be attached by now.
        return check, hello_refusal(hello, (state.pid for state in hub.jobs.values()))

    async def _read_hello(self, context: grpc.aio.ServicerContext) -> xmon_pb2.AgentHello | None:
        timeout = self._hub.hello_timeout_seconds
        try:
            first = await asyncio.wait_for(context.read(), timeout)
        except TimeoutError:
            self._hub.budget.refuse("hello_timeout")
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"no hello within {timeout:g} s")
            return None
        if first is grpc.aio.EOF or first.WhichOneof("kind") != "hello":
            self._hub.counters.reports_rejected += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first message must be a hello")
            return None
        hello = first.hello
        if hello.protocol_version not in SUPPORTED_PROTOCOLS:
            self._hub.counters.reports_rejected += 1
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol version {hello.protocol_version} not supported by daemon "
                f"{__version__} (supports {sorted(SUPPORTED_PROTOCOLS)})",
            )
            return None
        scrub(hello)  # no non-finite number reaches the daemon's arithmetic
        return hello

    async def _read_reports(
        self, context: grpc.aio.ServicerContext, stream_id: int, link: AgentLink
    ) -> None:
        # No variable holds a message across the next read: a message (up to max_message_bytes)
        # lives only while it is handled, not for as long as the agent stays silent.
        while self._handle(await context.read(), stream_id, link):
            pass

    def _handle(
        self, message: xmon_pb2.AgentMessage | object, stream_id: int, link: AgentLink
    ) -> bool:
        """Take one message from the agent; False when the stream is done."""
        hub = self._hub
        if not isinstance(message, xmon_pb2.AgentMessage):  # grpc.aio.EOF
            return False
        kind = message.WhichOneof("kind")
        state = hub.jobs.get(stream_id)
        if state is None:  # replaced by a newer stream of the same process
            return False
        if kind == "report":
            hub.counters.reports_received += 1
            scrub(message.report)
            state.apply(message.report, time.time(), time.monotonic())
        elif kind == "result":
            link.resolve(message.result)
        elif kind == "execution_sample":
            hub.ledger_reader.submit(state.ledger, message.execution_sample)
        elif kind == "oom":
            if hub.oom_sink is not None:
                scrub(message.oom)
                hub.oom_sink(state.job_name, state.pid, state.hello.hostname, message.oom)
        else:
            hub.counters.reports_rejected += 1
        return True


async def _write_commands(
    context: grpc.aio.ServicerContext, link: AgentLink, reader: asyncio.Task[None]
) -> None:
    """Write queued commands to the agent until its side of the stream ends."""
    ending = asyncio.ensure_future(link.ending.wait())
    try:
        await _write_until_ending(context, link, reader, ending)
    finally:
        ending.cancel()


async def _write_until_ending(
    context: grpc.aio.ServicerContext,
    link: AgentLink,
    reader: asyncio.Task[None],
    ending: asyncio.Future[Any],
) -> None:
    while True:
        getter = asyncio.ensure_future(link.outbox.get())
        waits: set[asyncio.Future[Any]] = {getter, reader, ending}
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if getter not in done:
            getter.cancel()
            return
        try:
            await context.write(getter.result())
        except Exception as exc:  # noqa: BLE001 - the stream broke; the reader sees it too
            log.debug("cannot write to an agent stream: %r", exc)
            return


async def _refuse_connection(context: grpc.aio.ServicerContext, limit: int) -> None:
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"this daemon already serves {limit} streams (max_connections)",
    )


def _finish_reader(reader: asyncio.Task[None] | None) -> None:
    if reader is None:
        return
    if not reader.done():
        reader.cancel()
    elif not reader.cancelled() and reader.exception() is not None:
        log.debug("agent stream ended: %r", reader.exception())


class ControlService(xmon_pb2_grpc.ControlServicer):
    def __init__(self, hub: Hub, profiler: Profiler | None = None) -> None:
        self._hub = hub
        self._profiler = profiler

    async def Subscribe(  # noqa: N802
        self, request: xmon_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> None:
        hub = self._hub
        if not hub.open_stream():
            await _refuse_connection(context, hub.max_connections)
            return
        try:
            if len(hub.subscribers) >= hub.max_subscribers:
                hub.budget.refuse("subscribers")
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"this daemon already streams to {hub.max_subscribers} views (max_subscribers)",
                )
                return
            await self._stream_snapshots(context)
        finally:
            hub.close_stream()

    async def _stream_snapshots(self, context: grpc.aio.ServicerContext) -> None:
        """Write each snapshot to the view; a view that takes none for
        ``subscriber_stall_seconds`` is cut off, so that the messages gRPC holds for views that
        never read stay bounded."""
        hub = self._hub
        queue: asyncio.Queue[xmon_pb2.SnapshotMessage] = asyncio.Queue(SUBSCRIBER_BUFFER)
        latest = hub.latest()
        if latest is not None:
            queue.put_nowait(latest)
        hub.subscribers.add(queue)
        try:
            while True:
                message = await queue.get()
                try:
                    await asyncio.wait_for(context.write(message), hub.subscriber_stall_seconds)
                except TimeoutError:
                    hub.budget.refuse("subscribers")
                    log.info(
                        "a view took no snapshot for %g s: cut off", hub.subscriber_stall_seconds
                    )
                    return
        finally:
            hub.subscribers.discard(queue)

    async def GetSnapshot(  # noqa: N802
        self, request: xmon_pb2.GetSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> xmon_pb2.SnapshotMessage:
        if request.fresh:
            return await self._fresh_snapshot(context)
        latest = self._hub.latest()
        if latest is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "daemon is starting: no snapshot yet")
            raise AssertionError("not reached: abort raises")
        return latest

    async def _fresh_snapshot(self, context: grpc.aio.ServicerContext) -> xmon_pb2.SnapshotMessage:
        hub = self._hub
        future: asyncio.Future[xmon_pb2.SnapshotMessage] = (
            asyncio.get_running_loop().create_future()
        )
        entry = (hub.collects_started, future)
        hub.fresh_waiters.append(entry)
        try:
            return await asyncio.wait_for(future, FRESH_TIMEOUT_FACTOR * hub.period_seconds + 5.0)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no fresh snapshot in time")
            raise
        finally:
            if entry in hub.fresh_waiters:
                hub.fresh_waiters.remove(entry)

    async def Capture(  # noqa: N802
        self, request: xmon_pb2.CaptureRequest, context: grpc.aio.ServicerContext
    ) -> xmon_pb2.CaptureReply:
        from xmon.daemon.capture import CaptureError

        profiler = await self._require_profiler(request.protocol_version, context)
        try:
            return await profiler.handle_capture(request)
        except CaptureError as exc:
            await context.abort(exc.code, exc.message)
            raise  # not reached: abort raises

    async def GetHlo(  # noqa: N802
        self, request: xmon_pb2.GetHloRequest, context: grpc.aio.ServicerContext
    ) -> xmon_pb2.GetHloReply:
        from xmon.daemon.capture import CaptureError

        profiler = await self._require_profiler(request.protocol_version, context)
        try:
            return await profiler.handle_get_hlo(request)
        except CaptureError as exc:
            await context.abort(exc.code, exc.message)
            raise

    async def _require_profiler(self, version: int, context: grpc.aio.ServicerContext) -> Profiler:
        if version not in SUPPORTED_PROTOCOLS:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol version {version} not supported by daemon {__version__}",
            )
        if self._profiler is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this daemon runs no profiler")
        assert self._profiler is not None
        return self._profiler
