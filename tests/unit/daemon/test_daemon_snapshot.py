"""The daemon's snapshot is one consistent moment: jobs and agent counts agree."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from xmon.config import DaemonConfig
from xmon.daemon.intake.convert import hello_of
from xmon.daemon.jobs import JobState
from xmon.daemon.service import Daemon
from xmon.wire.proto import xmon_pb2


def _daemon(tmp_path: Path) -> Daemon:
    config = DaemonConfig(socket_path=tmp_path / "xmon.sock", logdir=tmp_path / "tb")
    return Daemon(config, collectors=[])


def _connect(daemon: Daemon, job_name: str, pid: int) -> int:
    stream_id = daemon.hub.next_id()
    hello = xmon_pb2.AgentHello(protocol_version=1, job_name=job_name, pid=pid)
    daemon.hub.jobs[stream_id] = JobState(
        hello=hello_of(hello, daemon.hub.budget), connected_at=time.time()
    )
    return stream_id


def test_a_stream_closing_while_collectors_run_leaves_the_snapshot(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    leaving = _connect(daemon, "leaving", 11)
    _connect(daemon, "staying", 12)
    collect = daemon.runner.run_async

    async def collect_while_the_stream_closes(context: Any) -> Any:
        del daemon.hub.jobs[leaving]
        return await collect(context)

    daemon.runner.run_async = collect_while_the_stream_closes  # type: ignore[method-assign]
    snapshot = asyncio.run(daemon.build_snapshot())
    assert [job.job_name for job in snapshot.jobs] == ["staying"]
    assert snapshot.daemon.agents_connected == 1
