"""State the daemon's gRPC services and its snapshot loop share: the jobs, the open streams,
the latest snapshot and the views waiting for it.

Everything here runs on the daemon's asyncio loop (grpc.aio); state is only touched from it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from xmon.daemon.bounds import StateBudget
from xmon.daemon.intake.hello import Arrivals, PidClaims
from xmon.daemon.intake.links import AgentLink
from xmon.daemon.intake.parts import JoiningPool
from xmon.daemon.jobs import JobState
from xmon.daemon.ledger_reader import LedgerReader
from xmon.daemon.received import OomReport
from xmon.goodput.restarts import RestartMemory
from xmon.model import Snapshot
from xmon.wire.snapshot_encoding import EncodedSnapshot, SnapshotEncoder, fitting_snapshot

SUPPORTED_PROTOCOLS = frozenset({1})
HELLO_TIMEOUT_SECONDS = 10.0


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
    # streams at once that max_inflight_bytes allows (xmon.daemon.bounds.inflight_calls)
    max_inflight_streams: int = 4096
    max_subscribers: int = 64
    subscriber_stall_seconds: float = 10.0  # a view that takes no snapshot this long is cut off
    hello_timeout_seconds: float = HELLO_TIMEOUT_SECONDS
    # largest snapshot message sent to a view, and largest agent message joined from parts
    max_message_bytes: int = 16 * 1024 * 1024
    budget: StateBudget = field(default_factory=StateBudget)
    pid_claims: PidClaims = field(default_factory=PidClaims)  # verify_pids
    arrivals: Arrivals = field(default_factory=Arrivals)  # streams waiting for their hello
    streams: int = 0  # open streams of both services
    streams_closed: int = 0  # streams of both services that have ended
    jobs: dict[int, JobState] = field(default_factory=dict)
    counters: IngestCounters = field(default_factory=IngestCounters)
    snapshot: Snapshot | None = None
    _frame: Frame | None = None  # snapshot's encoding, made on demand
    _published: int = 0  # snapshots published: the number of the latest one's frame
    _whole_base: int | None = None  # frame whose programs the encoder holds, sent untrimmed
    encoder: SnapshotEncoder = field(default_factory=SnapshotEncoder)  # one for every view
    subscribers: set[asyncio.Queue[Frame]] = field(default_factory=set)
    links: dict[int, AgentLink] = field(default_factory=dict)  # stream id -> command channel
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    collects_started: int = 0  # snapshots whose collection has begun
    # (collects_started when asked, future) of each GetSnapshot(fresh=True) waiting
    fresh_waiters: list[tuple[int, asyncio.Future[EncodedSnapshot]]] = field(default_factory=list)
    ledger_reader: LedgerReader = field(default_factory=LedgerReader)
    restarts: RestartMemory = field(default_factory=RestartMemory)  # processes that ended
    joining: JoiningPool = field(init=False)  # messages in parts, over all agent streams
    # (job name, pid, host, report) of a job that ran out of memory (xmon.daemon.oom.OomSink)
    oom_sink: Callable[[str, int, str, OomReport], None] | None = None

    def __post_init__(self) -> None:
        self.ledger_reader.refused = self.budget.refused  # one table of refusals
        self.joining = JoiningPool(self.budget)

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
        """Count a new stream; False (and counted as refused, by the bound that refused it) past
        ``max_connections`` or the streams ``max_inflight_bytes`` allows."""
        if self.streams >= min(self.max_connections, self.max_inflight_streams):
            bound = "connections" if self.max_connections <= self.max_inflight_streams else None
            self.budget.refuse(bound or "inflight_bytes")
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
        self.snapshot, self._frame = snapshot, None
        self._published += 1
        if not self.subscribers and not (collect is not None and self.fresh_waiters):
            self.encoder.forget()  # no view reads: keep no encoded programs either
            self._whole_base = None
            return
        frame = self.latest_frame()
        assert frame is not None  # a snapshot was just set
        if collect is not None:
            waiting = []
            for asked, future in self.fresh_waiters:
                if future.done():
                    continue
                if asked < collect:
                    future.set_result(frame.whole)
                else:
                    waiting.append((asked, future))
            self.fresh_waiters = waiting
        for queue in self.subscribers:
            if queue.full():  # a slow view skips frames instead of growing memory
                queue.get_nowait()
            queue.put_nowait(frame)

    def latest(self) -> EncodedSnapshot | None:
        frame = self.latest_frame()
        return frame.whole if frame is not None else None

    def latest_frame(self) -> Frame | None:
        if self._frame is None and self.snapshot is not None:
            number = self._published
            message, left_out = fitting_snapshot(
                self.snapshot, self.max_message_bytes, self.encoder
            )
            self.budget.refuse("snapshot_programs", left_out)
            # Changes hold only from a whole predecessor: a trimmed frame's views lack programs
            # the encoder holds, and a frame never encoded was never sent.
            changes = self.encoder.changes if self._whole_base == number - 1 else None
            self._whole_base = number if not left_out else None
            self._frame = Frame(number, message, changes if not left_out else None)
        return self._frame


@dataclass(frozen=True)
class Frame:
    """One published snapshot for views: ``whole``, and ``changes`` from frame ``number - 1``
    (unchanged programs named by the job that had them there; xmon.wire.snapshot_encoding)
    for a view that was sent that frame, or None where there is none to send."""

    number: int
    whole: EncodedSnapshot
    changes: EncodedSnapshot | None = None

    def for_view(self, previous: int | None) -> EncodedSnapshot:
        """What a view asking for changes gets, ``previous`` being the frame it was sent last."""
        if self.changes is not None and previous == self.number - 1:
            return self.changes
        return self.whole


async def refuse_connection(context: grpc.aio.ServicerContext, hub: Hub) -> None:
    limit, key = hub.max_connections, "max_connections"
    if hub.max_inflight_streams < limit:
        limit, key = hub.max_inflight_streams, "max_inflight_bytes"
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED, f"this daemon already serves {limit} streams ({key})"
    )
