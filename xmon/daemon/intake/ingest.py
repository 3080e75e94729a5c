"""The agents' gRPC service: one bidirectional stream per attached job, a hello and then reports
up, commands down.

It runs on the daemon's asyncio loop (grpc.aio), so one thread serves any number of agent
streams.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from xmon import __version__
from xmon.daemon.bounds import StateBudget
from xmon.daemon.hub import SUPPORTED_PROTOCOLS, Hub, refuse_connection
from xmon.daemon.intake.convert import hello_of, oom_of, report_of, sample_of
from xmon.daemon.intake.hello import hello_refusal
from xmon.daemon.intake.links import AgentLink, SampleLength
from xmon.daemon.intake.parts import PartJoiner
from xmon.daemon.jobs import JobState
from xmon.daemon.peers import PidCheck, Verdict, watch_exit
from xmon.daemon.proof import PROOF_SECONDS, new_token, shows_token
from xmon.daemon.received import clean_label
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
from xmon.wire.protocol import PART_BYTES

log = logging.getLogger("xmon.daemon")


class IngestService(xmon_pb2_grpc.IngestServicer):
    def __init__(self, hub: Hub) -> None:
        self._hub = hub

    async def Connect(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[xmon_pb2.AgentMessage],
        context: grpc.aio.ServicerContext,
    ) -> None:
        if not self._hub.open_stream():
            await refuse_connection(context, self._hub)
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
        if refusal is None and check.verdict is Verdict.VERIFIED:
            check, refusal = await self._prove(context, hello, check)
        if refusal is None:
            refusal = self._claim(hello, check)
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
            hello=hello_of(hello, hub.budget),
            connected_at=time.time(),
            budget=hub.budget,
            pid_verified=check.verdict is Verdict.VERIFIED,
        )
        del hello  # the message, with any padding it carried, goes: the job keeps model objects
        link = hub.links[stream_id] = AgentLink()
        log.info("agent attached: job %r pid %d (%s)", job.job_name, job.pid,
                 "verified" if job.pid_verified else f"unverified: {check.reason}")  # fmt: skip
        reader: asyncio.Task[None] | None = None
        joiner = PartJoiner(hub.joining, hub.max_message_bytes)
        stop_watching = watch_exit(check, lambda: _process_exited(job, link))
        try:
            welcome = xmon_pb2.Welcome(
                protocol_version=xmon_pb2.PROTOCOL_VERSION,
                daemon_version=__version__,
                period_seconds=hub.period_seconds,
                max_part_bytes=PART_BYTES,
            )
            await context.write(xmon_pb2.DaemonMessage(welcome=welcome))
            # One task reads reports and results; this coroutine is the stream's only writer.
            reader = asyncio.create_task(self._read_reports(context, stream_id, link, joiner))
            await _write_commands(context, link, reader)
        finally:
            stop_watching()
            _finish_reader(reader)
            joiner.close()
            link.close("the job's agent disconnected")
            if hub.links.get(stream_id) is link:
                del hub.links[stream_id]
            state = hub.drop_job(stream_id)
            hub.counters.disconnects += 1
            if state is not None:
                log.info("agent detached: job %r pid %d", state.job_name, state.pid)
                if (key := state.restart_key()) is not None:
                    hub.restarts.ended(key, state.last_step_at())

    async def _judge_hello(
        self, hello: xmon_pb2.AgentHello
    ) -> tuple[PidCheck, tuple[grpc.StatusCode, str] | None]:
        """The verdict on the pid the hello claims from the daemon's connections, and why the
        hello is refused (or None)."""
        hub = self._hub
        unchecked = PidCheck(Verdict.UNKNOWN, "not checked")
        refusal = hello_refusal(hello, ())
        if refusal is not None:
            return unchecked, refusal
        check = await hub.pid_claims.check(hello.pid)
        refusal = hub.pid_claims.refusal(hello.pid, check)
        if refusal is not None:
            hub.budget.refuse("pid_claims")
            return check, refusal
        if check.host_pid is not None:
            hello.pid = check.host_pid  # the job is known by its pid here, not in its namespace
        return check, None

    async def _prove(
        self, context: grpc.aio.ServicerContext, hello: xmon_pb2.AgentHello, check: PidCheck
    ) -> tuple[PidCheck, tuple[grpc.StatusCode, str] | None]:
        """Bind a claim the connections verified to this stream (xmon.daemon.proof): the
        agent shows a token of this stream as one of its threads' names. An agent that offers
        no proof (an older one) keeps its claim unverified."""
        hub = self._hub
        pid = hello.pid
        if not hello.proves_process:
            reason = f"pid {pid} holds a connection, but its agent offers no proof of this stream"
            check = PidCheck(Verdict.UNKNOWN, reason, check.host_pid, check.pidfd)
        else:
            token = new_token()
            await context.write(xmon_pb2.DaemonMessage(prove=xmon_pb2.ProveProcess(token=token)))
            answer = await _next_message(context, PROOF_SECONDS)
            if answer is None or answer.WhichOneof("kind") != "shown":
                check = PidCheck(Verdict.REFUTED, f"no proof of pid {pid} came on this stream")
            elif answer.shown.token != token:
                check = PidCheck(Verdict.REFUTED, f"a wrong token came for pid {pid}")
            else:
                shown = await asyncio.to_thread(shows_token, pid, token)
                if shown:
                    return check, None
                if shown is None:
                    reason = f"the threads of process {pid} cannot be read"
                    check = PidCheck(Verdict.UNKNOWN, reason, check.host_pid, check.pidfd)
                else:
                    reason = f"process {pid} does not show this stream's token: not its stream"
                    check = PidCheck(Verdict.REFUTED, reason)
        refusal = hub.pid_claims.refusal(pid, check)
        if refusal is not None:
            hub.budget.refuse("pid_claims")
        return check, refusal

    def _claim(
        self, hello: xmon_pb2.AgentHello, check: PidCheck
    ) -> tuple[grpc.StatusCode, str] | None:
        """Take the pid for this stream, or say why not. A live stream keeps its pid, unless
        its claim was never proven and this one is: then the job's own agent takes it back."""
        hub = self._hub
        holders = [sid for sid, state in hub.jobs.items() if state.pid == hello.pid]
        if check.verdict is Verdict.VERIFIED and holders:
            unproven = [sid for sid in holders if not hub.jobs[sid].pid_verified]
            for stream_id in unproven:
                state = hub.drop_job(stream_id)
                link = hub.links.get(stream_id)
                if link is not None:
                    link.ending.set()
                if state is not None:
                    log.warning("stream of job %r gave up pid %d to the process itself: its "
                                "claim was never proven", state.job_name, hello.pid)  # fmt: skip
            holders = [sid for sid in holders if sid not in unproven]
        return hello_refusal(hello, (hub.jobs[sid].pid for sid in holders))

    async def _read_hello(self, context: grpc.aio.ServicerContext) -> xmon_pb2.AgentHello | None:
        hub = self._hub
        ticket, closing, closed = hub.arrivals.enter()
        hub.budget.refuse("pending_hellos", closed)
        try:
            first = await _first_message(context, hub.hello_timeout_seconds, closing, hub.budget)
        finally:
            hub.arrivals.leave(ticket)
        if first is None:  # the stream is already ended
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
        return hello

    async def _read_reports(
        self,
        context: grpc.aio.ServicerContext,
        stream_id: int,
        link: AgentLink,
        joiner: PartJoiner,
    ) -> None:
        # No variable holds a message across the next read: a message (up to a part's size)
        # lives only while it is handled, not for as long as the agent stays silent.
        while self._handle(await context.read(), stream_id, link, joiner):
            pass

    def _handle(
        self,
        message: xmon_pb2.AgentMessage | object,
        stream_id: int,
        link: AgentLink,
        joiner: PartJoiner,
    ) -> bool:
        """Take one message from the agent; False when the stream is done."""
        hub = self._hub
        if not isinstance(message, xmon_pb2.AgentMessage):  # grpc.aio.EOF
            return False
        kind = message.WhichOneof("kind")
        if kind == "part":  # a large message, sent in parts: handled once whole
            joined = joiner.add(message.part)
            if joined is None:
                if joiner.abusive:
                    log.warning("agent stream %d ended: %d messages in parts refused in a row",
                                stream_id, joiner.refused_in_a_row)  # fmt: skip
                    return False
                return True
            message, kind = joined, joined.WhichOneof("kind")
        state = hub.jobs.get(stream_id)
        if state is None:  # replaced by a newer stream of the same process
            return False
        if kind == "report":
            hub.counters.reports_received += 1
            report = report_of(message.report, hub.budget, state.devices, state.report)
            state.apply(report, time.time(), time.monotonic())
            _ask_sample_length(state, link)
        elif kind == "result":
            link.resolve(message.result)
        elif kind == "execution_sample":
            sample = sample_of(message.execution_sample, state.conditionals_by_id())
            hub.ledger_reader.submit(state.ledger, sample)
        elif kind == "oom":
            if hub.oom_sink is not None:
                hub.oom_sink(state.job_name, state.pid, state.hello.hostname, oom_of(message.oom))
        else:
            hub.counters.reports_rejected += 1
        return True


def _ask_sample_length(state: JobState, link: AgentLink) -> None:
    """Ask the agent for the sample length its job needs, once it changed (xmon.execution.
    ledger): at least, where samples of a job without markers are too short for its steps, or
    too short to hold two runs of a rarer program (0 once the job marks steps: as configured);
    at most, where its samples were refused for their size."""
    ledger = state.ledger
    wanted, most = ledger.sample_seconds_wanted, ledger.sample_seconds_most
    if (wanted is None and most is None) or (wanted, most) == state.sample_seconds_told:
        return
    if link.tell(SampleLength(seconds=wanted or 0.0, max_seconds=most or 0.0)):
        state.sample_seconds_told = (wanted, most)


async def _next_message(
    context: grpc.aio.ServicerContext, timeout: float
) -> xmon_pb2.AgentMessage | None:
    """The stream's next message, or None at its end or past ``timeout``."""
    try:
        message = await asyncio.wait_for(context.read(), timeout)
    except TimeoutError:
        return None
    return message if isinstance(message, xmon_pb2.AgentMessage) else None


async def _first_message(
    context: grpc.aio.ServicerContext,
    timeout: float,
    closing: asyncio.Event,
    budget: StateBudget,
) -> Any:
    """The stream's first message (or grpc.aio.EOF); None once the stream is ended because
    none came within ``timeout`` or because newer streams needed its place among those
    awaiting a hello."""
    try:
        return await asyncio.wait_for(context.read(), timeout)
    except TimeoutError:
        budget.refuse("hello_timeout")
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not closing.is_set() or task is None:  # cancelled by gRPC: the call is over
            raise
        task.uncancel()  # cancelled by Arrivals.enter: this stream waited longest
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "too many streams are waiting to send a hello (max_pending_hellos); "
            "this one waited longest",
        )
    await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"no hello within {timeout:g} s")
    return None


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
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also when gRPC cancels this handler as the job's stream ends: a getter left
            # waiting on the dropped link's queue was destroyed pending ("Task was destroyed
            # but it is pending!" in the daemon's log after ordinary job exits).
            if not getter.done():
                getter.cancel()
        if getter not in done:
            return
        try:
            await context.write(getter.result())
        except Exception as exc:  # noqa: BLE001 - the stream broke; the reader sees it too
            log.debug("cannot write to an agent stream: %r", exc)
            return


def _process_exited(job: JobState, link: AgentLink) -> None:
    """The verified process of a stream exited (a child it left may hold the connection):
    its claim ends with it, so its pid is free for whatever process is given it next."""
    log.info("agent's process exited: job %r pid %d: its stream is ended", job.job_name, job.pid)
    link.ending.set()


def _finish_reader(reader: asyncio.Task[None] | None) -> None:
    if reader is None:
        return
    if not reader.done():
        reader.cancel()
    elif not reader.cancelled() and reader.exception() is not None:
        log.debug("agent stream ended: %r", reader.exception())
