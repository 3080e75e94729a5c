"""The host collector against the real psutil of this machine, and its maths from tables."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from xmon.collectors import CollectContext
from xmon.collectors.host import HostCollector


def context(*pids: int) -> CollectContext:
    return CollectContext(pids=pids, monotonic=time.monotonic())


def test_dead_pid_is_skipped_silently() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    collector = HostCollector()
    output = collector.collect(context(os.getpid(), child.pid))
    assert set(output.processes) == {os.getpid()}
    assert collector.tracked_pids == (os.getpid(),)


def test_pid_that_dies_or_leaves_is_dropped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        collector = HostCollector()
        assert child.pid in collector.collect(context(child.pid, os.getpid())).processes
        child.kill()
        child.wait()
        output = collector.collect(context(child.pid, os.getpid()))
        assert child.pid not in output.processes
        assert collector.tracked_pids == (os.getpid(),)
        collector.collect(context())  # the job detached
        assert collector.tracked_pids == ()
    finally:
        child.kill()
        child.wait()
