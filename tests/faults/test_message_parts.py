"""Messages larger than the daemon's receive limit, sent in parts (xmon.wire.protocol.in_parts)
and joined by the daemon (xmon.daemon.intake.parts): whole again, bounded per stream and over all
streams, and a real daemon takes a large execution sample in parts while refusing one sent whole."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from xmon.agent.transport import Outgoing, Transport
from xmon.daemon.bounds import StateBudget
from xmon.daemon.intake.parts import (
    MAX_REFUSED_IN_A_ROW,
    STALE_SECONDS,
    JoiningPool,
    PartJoiner,
)
from xmon.wire import paths
from xmon.wire.client import DaemonClient
from xmon.wire.proto import xmon_pb2
from xmon.wire.protocol import PART_BYTES, RECEIVE_LIMIT_BYTES, in_parts

from support.flood_attacks import (
    RawStream,
    close_all,
    config_daemon,
    hello,
    in_part_frames,
    padded,
    report,
)
from support.procs import wait_for

MiB = 2**20


def sample(size: int) -> xmon_pb2.AgentMessage:
    return xmon_pb2.AgentMessage(
        execution_sample=xmon_pb2.ExecutionSample(started_at=1.0, xspace=b"\x07" * size)
    )


def joiner(max_message: int = 16 * MiB, pool: int = 64 * MiB) -> PartJoiner:
    return PartJoiner(JoiningPool(StateBudget(), max_bytes=pool), max_message)


def join(j: PartJoiner, parts: list[xmon_pb2.AgentMessage]) -> list[xmon_pb2.AgentMessage]:
    joined = [j.add(p.part) for p in parts]
    return [m for m in joined if m is not None]


@pytest.mark.parametrize("size", [0, 10, PART_BYTES - 64, PART_BYTES, 3 * PART_BYTES + 5])
def test_a_message_goes_whole_or_in_parts_and_is_joined_as_it_was(size: int) -> None:
    message = sample(size)
    parts = in_parts(message, PART_BYTES)
    if message.ByteSize() <= PART_BYTES:
        assert parts == [message]
        return
    assert [p.part.index for p in parts] == list(range(len(parts)))
    assert [p.part.last for p in parts] == [False] * (len(parts) - 1) + [True]
    assert all(p.ByteSize() <= RECEIVE_LIMIT_BYTES for p in parts)
    j = joiner()
    assert join(j, parts) == [message]
    assert j.pool.in_use == 0


def test_a_daemon_that_takes_whole_messages_gets_them_whole() -> None:
    message = sample(5 * PART_BYTES)
    assert in_parts(message, 0) == [message]


def test_one_stream_may_hold_no_more_than_the_largest_message() -> None:
    j = joiner(max_message=2 * PART_BYTES)
    too_large = in_parts(sample(3 * PART_BYTES), PART_BYTES)
    fits = sample(PART_BYTES + 10)
    assert join(j, too_large + in_parts(fits, PART_BYTES)) == [fits]  # the next one goes on
    assert j.pool.budget.refused == {"message_parts": 1} and j.pool.in_use == 0


def test_all_streams_together_hold_no_more_than_the_pool() -> None:
    pool = JoiningPool(StateBudget(), max_bytes=3 * PART_BYTES)
    first, second = PartJoiner(pool, 16 * MiB), PartJoiner(pool, 16 * MiB)
    a = in_parts(sample(2 * PART_BYTES), PART_BYTES)  # two full parts and a short last one
    b = in_parts(sample(2 * PART_BYTES), PART_BYTES)
    first.add(a[0].part)
    first.add(a[1].part)
    second.add(b[0].part)  # 3 parts held: the pool is full
    assert pool.in_use == 3 * PART_BYTES
    assert second.add(b[1].part) is None and second.add(b[2].part) is None  # dropped
    assert pool.budget.refused == {"message_parts": 1} and pool.in_use == 2 * PART_BYTES
    assert first.add(a[2].part) is not None  # the room the dropped one gave back
    assert pool.in_use == 0


def test_parts_out_of_order_or_unfinished_are_dropped_and_counted() -> None:
    j = joiner()
    parts = in_parts(sample(3 * PART_BYTES), PART_BYTES)
    whole = sample(2 * PART_BYTES)
    # index 2 before 1: the message goes; an unfinished one is dropped by the next index 0
    assert join(j, [parts[0], parts[2], parts[3], parts[0], parts[1]]) == []
    assert join(j, in_parts(whole, PART_BYTES)) == [whole]
    assert j.pool.budget.refused["message_parts"] == 2 and j.pool.in_use == 0


@pytest.mark.parametrize(
    "inner",
    [
        xmon_pb2.AgentMessage(hello=xmon_pb2.AgentHello(pid=1, job_name="x" * PART_BYTES)),
        xmon_pb2.AgentMessage(part=xmon_pb2.MessagePart(data=b"y" * 2 * PART_BYTES, last=True)),
    ],
)
def test_a_hello_or_a_part_inside_parts_is_refused(inner: xmon_pb2.AgentMessage) -> None:
    j = joiner()
    assert join(j, in_parts(inner, PART_BYTES)) == []
    assert j.pool.budget.refused == {"message_parts": 1}


def test_bytes_that_are_no_message_are_refused() -> None:
    j = joiner()
    garbage = xmon_pb2.MessagePart(index=0, last=True, data=b"\xff" * 100)
    assert j.add(garbage) is None and j.pool.budget.refused == {"message_parts": 1}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_messages_left_unfinished_give_their_room_to_other_streams_once_stale() -> None:
    """Streams that start messages and stop cannot keep the pool: past STALE_SECONDS their
    unfinished messages are dropped (oldest first, counted) when another stream needs room."""
    clock = Clock()
    pool = JoiningPool(StateBudget(), max_bytes=3 * PART_BYTES, clock=clock)
    stalled, late, good = (PartJoiner(pool, 16 * MiB) for _ in range(3))
    a = in_parts(sample(3 * PART_BYTES), PART_BYTES)
    stalled.add(a[0].part)
    stalled.add(a[1].part)  # then never another part
    clock.now = 1.0
    c = in_parts(sample(3 * PART_BYTES), PART_BYTES)
    late.add(c[0].part)  # the pool is full
    b = in_parts(sample(2 * PART_BYTES), PART_BYTES)
    clock.now = STALE_SECONDS - 1
    assert good.add(b[0].part) is None and pool.budget.refused == {"message_parts": 1}
    clock.now = STALE_SECONDS + 0.5  # only the first is stale: it goes, the other stays
    assert good.add(b[0].part) is None and good.add(b[1].part) is None
    assert pool.budget.refused == {"message_parts": 2} and list(pool.holders) == [
        id(late),
        id(good),
    ]
    clock.now = STALE_SECONDS + 2  # now the other is stale too: it gives the last part room
    assert good.add(b[2].part) == sample(2 * PART_BYTES)
    assert pool.budget.refused == {"message_parts": 3} and pool.in_use == 0
    assert stalled.add(a[2].part) is None and late.add(c[1].part) is None  # let go, uncounted
    assert pool.budget.refused == {"message_parts": 3} and not pool.holders


def test_a_stream_of_empty_parts_is_refused_part_by_part_then_ended() -> None:
    j = joiner()
    empty = xmon_pb2.MessagePart(index=0, last=False, data=b"")
    for n in range(1, MAX_REFUSED_IN_A_ROW):
        assert j.add(empty) is None and not j.abusive and j.pool.in_use == 0
        assert j.pool.budget.refused == {"message_parts": n}
    assert j.add(empty) is None and j.abusive
    fresh = joiner()
    for _ in range(MAX_REFUSED_IN_A_ROW - 1):
        fresh.add(empty)
    whole = sample(2 * PART_BYTES)
    assert join(fresh, in_parts(whole, PART_BYTES)) == [whole]
    assert fresh.refused_in_a_row == 0  # a message joined: the count starts again


@pytest.mark.e2e
def test_a_real_daemon_ends_a_stream_of_empty_parts_and_serves_the_others(
    tmp_path: Path,
) -> None:
    daemon = config_daemon(tmp_path)
    empty = xmon_pb2.AgentMessage(part=xmon_pb2.MessagePart(index=0, last=False, data=b""))
    streams = [RawStream(daemon.socket_path, [hello(400), *[empty.SerializeToString()] * 10_000])]
    try:
        wait_for(lambda: "messages in parts refused in a row" in daemon.log(), 30,
                 "the stream of empty parts to be ended")  # fmt: skip
        good = xmon_pb2.AgentMessage.FromString(padded(report(programs=500), 1 * MiB))
        streams.append(RawStream(daemon.socket_path, [hello(401), *in_part_frames(
            good.SerializeToString())], keepalive=1.0))  # fmt: skip
        with DaemonClient(daemon.socket_path) as client:

            def programs() -> int:
                jobs = [j for j in client.get_snapshot().jobs if j.pid == 401]
                return len(jobs[0].programs) if jobs else 0

            wait_for(lambda: programs() == 500, 30, "a good agent's report in parts")
        name = 'xmon_daemon_refused_total{bound="message_parts"}'
        refused = [line for line in daemon.scrape().splitlines() if line.startswith(name)]
        assert refused and float(refused[0].split()[-1]) == MAX_REFUSED_IN_A_ROW, refused
    finally:
        close_all(streams)
        daemon.stop()


@pytest.mark.e2e
def test_a_real_daemon_takes_a_large_message_in_parts_and_refuses_it_whole(
    tmp_path: Path,
) -> None:
    """A 3 MiB report in parts is joined and read (its 2,000 programs reach the snapshot); the
    same bytes in one message end that stream with RESOURCE_EXHAUSTED before the daemon holds
    them, and 32 streams of 15 MiB messages leave its memory where it was."""
    daemon = config_daemon(tmp_path)
    process = psutil.Process(daemon.popen.pid)
    streams: list[RawStream] = []
    try:
        big = xmon_pb2.AgentMessage.FromString(padded(report(programs=2000), 3 * MiB))
        assert big.ByteSize() > RECEIVE_LIMIT_BYTES
        frames = [hello(100), *in_part_frames(big.SerializeToString())]
        streams.append(RawStream(daemon.socket_path, frames, keepalive=1.0))
        with DaemonClient(daemon.socket_path) as client:

            def programs() -> int:
                jobs = [j for j in client.get_snapshot().jobs if j.pid == 100]
                return len(jobs[0].programs) if jobs else 0

            wait_for(lambda: programs() == 2000, 30, "the report joined from its parts")
        streams.append(RawStream(daemon.socket_path, [hello(101), big.SerializeToString()]))
        wait_for(lambda: "agent detached: job 'flood101' pid 101" in daemon.log(), 30,
                 "the stream that sent 3 MiB whole to end")  # fmt: skip
        before = process.memory_info().rss
        flood = [RawStream(daemon.socket_path, [hello(200 + i, padding=15 * MiB)])
                 for i in range(32)]  # fmt: skip
        streams += flood
        wait_for(lambda: all(s.call.done() for s in flood), 60, "the 32 padded hellos' streams")
        time.sleep(1)
        growth = (process.memory_info().rss - before) / MiB
        assert growth < 16, f"32 streams of 15 MiB grew the daemon by {growth:.0f} MiB"
        assert daemon.alive() and 'pid="100"' in daemon.scrape()
    finally:
        close_all(streams)
        daemon.stop()


@pytest.mark.e2e
def test_the_agent_s_transport_sends_a_large_message_in_parts(tmp_path: Path) -> None:
    daemon = config_daemon(tmp_path)
    first = xmon_pb2.AgentMessage.FromString(hello(300))
    transport = Transport(paths.grpc_target(daemon.socket_path), lambda: first, lambda c: None)
    names = [f"jit_{i}_{'x' * 300}" for i in range(4000)]
    big = xmon_pb2.AgentMessage(
        report=xmon_pb2.AgentReport(
            seq=1, programs=[xmon_pb2.ProgramInfo(fingerprint=f"{i:064x}", name=name)
                             for i, name in enumerate(names)],
        )
    )  # fmt: skip
    assert big.ByteSize() > RECEIVE_LIMIT_BYTES
    transport.start()
    try:
        wait_for(lambda: transport.connected, 30, "the transport's welcome")
        assert transport.offer(Outgoing(big))
        with DaemonClient(daemon.socket_path) as client:

            def programs() -> int:
                jobs = [j for j in client.get_snapshot().jobs if j.pid == 300]
                return len(jobs[0].programs) if jobs else 0

            wait_for(lambda: programs() == 4000, 30, "the report's 4,000 programs")
        assert transport.counters.reports_sent == 1 and transport.connected
    finally:
        transport.stop()
        daemon.stop()
