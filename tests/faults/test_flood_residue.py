"""A flood leaves nothing of itself in the daemon once its jobs and views are gone.

The daemon runs in this process (its real gRPC server on a real socket, its /metrics server,
its TensorBoard exporter), so the test can count the Python objects it holds before and after.
RSS cannot show this: CPython keeps the small-object arenas a flood filled for as long as any
object lives in them (docs/reliability.md), so RSS after a flood says how high it went, not
what was kept.
"""

from __future__ import annotations

import asyncio
import gc
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc

from xmon.config import DaemonConfig
from xmon.config.profiling import ProfilingConfig
from xmon.daemon.service import Daemon
from xmon.exporters.prometheus import SnapshotCollector
from xmon.wire.client import decode
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

from support.flood_attacks import RawStream, StalledView, close_all, hello, report

JOBS, PROGRAMS = 4, 1024
PERIOD = 0.2


HELD_BY_RENDERS = "jobs held by /metrics renders"


def _census() -> Counter[str]:
    """Live objects of the daemon's own types, by type; '*' counts every tracked object."""
    gc.collect()
    objects = gc.get_objects()
    counts = Counter(
        type(o).__qualname__
        for o in objects
        if str(vars(type(o)).get("__module__", "")).startswith(("xmon.", "exporters."))
    )
    counts["*"] = len(objects)
    # /metrics keeps a bounded few renders (Rendered), each with its collector (the current
    # one, the last fresh one for early scrapes, one in the background): how many are alive
    # depends on where the scrape rhythm stands. What counts is that none holds a flood's job.
    counts[HELD_BY_RENDERS] = sum(
        len(o._snapshot.jobs)
        for o in objects
        # by type, not isinstance: an ABC's check keeps a weak reference to each type it saw
        if type(o) is SnapshotCollector and o._snapshot is not None
    )
    counts["SnapshotCollector"] = counts["Rendered"] = 0
    return counts


def _flood(daemon: Daemon, pids: range) -> int:
    """Jobs with many programs, a view reading every snapshot, a view that never reads, and
    scrapes of /metrics while they last: what views, exporters and caches all keep."""
    socket_path = daemon.config.socket_path
    streams = [RawStream(socket_path, [hello(p), report(programs=PROGRAMS)], keepalive=PERIOD)
               for p in pids]  # fmt: skip
    stalled = [StalledView(socket_path)]
    with grpc.insecure_channel(
        f"unix://{socket_path}", options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as channel:
        view = xmon_pb2_grpc.ControlStub(channel).Subscribe(
            xmon_pb2.SubscribeRequest(protocol_version=1)
        )
        programs = 0
        for message in view:  # until a snapshot holds every job with all its programs
            jobs = [j for j in decode(message).jobs if j.pid in pids]
            programs = sum(len(j.programs) for j in jobs)
            _scrape(daemon)
            if len(jobs) == len(pids) and programs >= len(pids) * PROGRAMS:
                break
        view.cancel()
    close_all(stalled)
    close_all(streams)
    return programs


def _scrape(daemon: Daemon) -> str:
    url = f"http://127.0.0.1:{daemon.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()  # type: ignore[no-any-return]


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_a_flood_of_programs_and_views_leaves_no_object_behind(tmp_path: Path) -> None:
    config = DaemonConfig(
        listen_host="127.0.0.1",
        listen_port=0,
        socket_path=tmp_path / "xmon.sock",
        logdir=tmp_path / "tb",
        period_seconds=PERIOD,
        agent_timeout_seconds=2.0,
        verify_pids="off",  # the jobs claim made-up pids
        profiling=ProfilingConfig(tensorboard_interval_seconds=0.0),  # scalars every snapshot
    )
    daemon = Daemon(config, collectors=[])

    async def served_floods() -> tuple[Counter[str], list[Counter[str]], list[int]]:
        running = asyncio.create_task(daemon.run())
        await _until(lambda: daemon.metrics_port is not None and config.socket_path.exists())

        async def flood(first_pid: int) -> int:
            pids = range(first_pid, first_pid + JOBS)
            shown = await asyncio.to_thread(_flood, daemon, pids)
            await _until(lambda: not daemon.hub.jobs and not daemon.hub.subscribers)
            for _ in range(3):  # snapshots, /metrics and TensorBoard without the flood's jobs
                await daemon.tick()
            await asyncio.to_thread(_scrape, daemon)
            return shown

        try:
            # The first jobs load what any job would (the TensorBoard exporter, its protos):
            # that is the daemon in service, the state a flood meets.
            await flood(100)
            before = _census()
            shown, after = [], []
            for first_pid in (200, 300):
                shown.append(await flood(first_pid))
                after.append(_census())
        finally:
            daemon.request_stop()
            await running
        return before, after, shown

    before, after, shown = asyncio.run(served_floods())
    assert shown == [JOBS * PROGRAMS] * 2  # the floods reached a view in full
    for census in after:
        kept = {name: n - before[name] for name, n in census.items() if n > before[name]}
        own = {name: n for name, n in kept.items() if name != "*"}
        assert not own, f"objects of the flood kept: {own}"
        # 4,096 programs and their jobs were ~10^5 objects; what stays is the daemon's own
        # bookkeeping (a counter's new label, a grown dict), never per program or per job.
        assert kept.get("*", 0) < 500, kept
