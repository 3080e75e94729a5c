"""Views are sent a job's program catalogue when it changes, not every period: a real daemon,
an agent stream announcing 4,000 programs, and views on the daemon's socket, one asking for
changes (as xmon top and xmon monitor do) and one not (an older view)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import grpc

from xmon.wire.client import DaemonClient
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

from support.flood_attacks import RawStream, hello, in_part_frames, report
from support.procs import start_daemon, wait_for

PROGRAMS = 4000  # and one more later: the daemon keeps at most 4,096 a job


def _agent_frames(more_after: float) -> Iterator[bytes]:
    """The agent's hello and its catalogue, then one more program ``more_after`` seconds on."""
    yield hello(4242)
    yield from in_part_frames(report(programs=PROGRAMS))  # in parts, as an agent sends it
    time.sleep(more_after)
    yield from in_part_frames(report(programs=PROGRAMS + 1, seq=2))


def _raw_sizes(socket_path: Path, changes_only: bool, count: int) -> list[int]:
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        request = xmon_pb2.SubscribeRequest(protocol_version=1, changes_only=changes_only)
        stream = xmon_pb2_grpc.ControlStub(channel).Subscribe(request)
        sizes = [len(message.json) for message in itertools.islice(stream, count)]
        stream.cancel()
    return sizes


def test_a_view_gets_the_catalogue_once_and_reads_every_snapshot_whole(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path, period=0.25, env={"XMON_VERIFY_PIDS": "off"})  # made-up pid
    agent = RawStream(daemon.socket_path, _agent_frames(more_after=4.0), keepalive=0.2)
    try:
        with DaemonClient(daemon.socket_path) as client:
            wait_for(lambda: any(len(j.programs) == PROGRAMS for j in client.get_snapshot().jobs),
                     20, "the catalogue in the snapshot")  # fmt: skip
            counts: list[int] = []
            for snapshot in client.subscribe():
                (job,) = snapshot.jobs
                assert {p.name for p in job.programs} == {
                    f"jit_{i}" for i in range(len(job.programs))
                }
                counts.append(len(job.programs))
                if len(job.programs) == PROGRAMS + 1 or len(counts) > 200:
                    break
        # every snapshot whole, before and after the catalogue changed
        assert set(counts) == {PROGRAMS, PROGRAMS + 1} and len(counts) >= 5, counts
        changes = _raw_sizes(daemon.socket_path, changes_only=True, count=4)
        whole = _raw_sizes(daemon.socket_path, changes_only=False, count=4)
    finally:
        agent.close()
        daemon.stop()
    # the first frame whole, then only what changed (the job's counters, not its programs)
    # (gzip: 4,000 programs are ~55 KB, the rest of a snapshot ~3 KB)
    assert changes[0] > 40_000 and max(changes[1:]) < changes[0] / 10, changes
    assert min(whole) > 40_000, whole  # a view that does not ask gets every frame whole
