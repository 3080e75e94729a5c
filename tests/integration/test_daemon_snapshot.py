"""The daemon's snapshot is one consistent moment: jobs and agent counts agree."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from xmon.config import DaemonConfig
from xmon.daemon.intake.convert import hello_of
from xmon.daemon.jobs import JobState
from xmon.daemon.service import Daemon
from xmon.wire.proto import xmon_pb2


def _connect(daemon: Daemon, job_name: str, pid: int) -> int:
    stream_id = daemon.hub.next_id()
    hello = xmon_pb2.AgentHello(protocol_version=1, job_name=job_name, pid=pid)
    daemon.hub.jobs[stream_id] = JobState(
        hello=hello_of(hello, daemon.hub.budget), connected_at=time.time()
    )
    return stream_id


def test_hardware_rpcs_only_for_snapshots_someone_reads(tmp_path: Path) -> None:
    from support.fakes.libtpu_server import FakeLibtpu, scenario

    with FakeLibtpu(scenario("v6e", 8)) as tpu:
        config = DaemonConfig(
            socket_path=tmp_path / "xmon.sock",
            logdir=tmp_path / "tb",
            tpu_metrics_addresses=(tpu.address,),
            tpu_full_poll_seconds=60.0,
        )
        daemon = Daemon(config, collectors=["tpu"])

        async def ticks(n: int) -> None:
            for _ in range(n):
                await daemon.tick()

        try:
            asyncio.run(ticks(1))  # the first, full poll
            fetched = tpu.calls["GetRuntimeMetric"]
            asyncio.run(ticks(5))  # no view, no scraper, no job: nothing refreshed
            assert tpu.calls["GetRuntimeMetric"] == fetched
            daemon.hub.subscribers.add(asyncio.Queue(4))  # `xmon top` attached
            asyncio.run(ticks(5))
            assert tpu.calls["GetRuntimeMetric"] == fetched + 5 * 3  # the live gauges, each tick
        finally:
            daemon.runner.close()


def test_a_tick_only_tensorboard_reads_polls_no_chip_the_jobs_do_not_hold(
    tmp_path: Path,
) -> None:
    from support.fakes.libtpu_server import FakeLibtpu, scenario

    with FakeLibtpu(scenario("v6e", 8)) as tpu:
        config = DaemonConfig(
            socket_path=tmp_path / "xmon.sock",
            logdir=tmp_path / "tb",
            tpu_metrics_addresses=(tpu.address,),
            tpu_full_poll_seconds=0.0,
        )
        daemon = Daemon(config, collectors=["tpu"])
        try:
            asyncio.run(daemon.tick())  # the first snapshot: read in full
            _connect(daemon, "train", 11)  # holds no chip of this fake service
            assert not daemon._read_in_full() and daemon._exported()  # TensorBoard only
            fetched = dict(tpu.calls)
            asyncio.run(daemon.build_snapshot(live=True, full=False))
            assert tpu.calls == fetched
            asyncio.run(daemon.build_snapshot(live=True, full=True))  # a scrape or a view
            assert tpu.calls["GetRuntimeMetric"] > fetched["GetRuntimeMetric"]
        finally:
            daemon.runner.close()
