"""Execution samples and traces are data a job sends: whatever numbers and sizes they hold,
they must not end the daemon, which serves every other job on the host."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.flood_attacks import (
    RawStream,
    config_daemon,
    distinct_ids_space,
    execution_sample,
    hello,
    in_part_frames,
    refused,
    samples_every,
    scrape_seconds,
    stepping_space,
)
from support.memory_limit import limit_memory, release
from support.procs import wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("gap", [1e308, 5e-324])
def test_step_begins_no_session_could_hold_are_refused(tmp_path: Path, gap: float) -> None:
    """Begins 1e308 s apart made the step rate 1e-308 (OverflowError rounding an infinite
    ratio), 5e-324 s apart infinite (ZeroDivisionError): either ended the daemon."""
    daemon = config_daemon(tmp_path)
    sample = execution_sample(stepping_space(), step_begins=[0.0, gap])
    stream = RawStream(daemon.socket_path, [hello(4242), sample, sample], keepalive=0.5)
    try:
        wait_for(lambda: refused(daemon.scrape()).get("sample_numbers", 0) >= 1, 20,
                 "the sample to be refused")  # fmt: skip
        time.sleep(2.0)  # a few snapshots: the ledger's rates are taken at each
        assert daemon.alive(), daemon.log()
        assert scrape_seconds(daemon.metrics_url) < 1.0
        assert "Traceback" not in daemon.log()
        assert daemon.log().count("execution samples refused") == 1
    finally:
        stream.close()
        daemon.stop()


def test_samples_of_distinct_ids_leave_a_memory_limited_daemon_serving(tmp_path: Path) -> None:
    """Four jobs each send two 15 MiB samples whose every event has its own program, run and
    device: reading one took ~560 MiB, four at once passed the service's 1 GiB limit. Now the
    read stops at the first bound it passes (4,096 programs), having held ~30 MiB, and the
    samples that arrive while 32 MiB of them wait are dropped (``ledger_bytes``), as is a
    job's second while its first waits: the daemon must live through the reads, serving."""
    daemon = config_daemon(tmp_path)
    how = limit_memory(daemon.popen.pid, 1 << 30, f"xmon-samples-{os.getpid()}")
    sample = in_part_frames(execution_sample(distinct_ids_space(15 << 20)))
    streams = [
        RawStream(daemon.socket_path, [hello(5000 + i), *sample, *sample], keepalive=0.5)
        for i in range(4)
    ]
    try:
        slowest = 0.0
        deadline = time.monotonic() + 90
        settled: float | None = None  # when the first sample was read to its bound
        while settled is None or time.monotonic() < settled + 10:  # the rest read meanwhile
            assert daemon.alive(), f"killed ({how} limit):\n{daemon.log()[-2000:]}"
            assert time.monotonic() < deadline, refused(daemon.scrape())
            if settled is None and refused(daemon.scrape()).get("xspace_ids", 0) >= 1:
                settled = time.monotonic()
            slowest = max(slowest, scrape_seconds(daemon.metrics_url))
            time.sleep(0.25)
        assert slowest < 1.0
        assert daemon.alive() and "Traceback" not in daemon.log()
    finally:
        for stream in streams:
            stream.close()
        daemon.stop()
        release(f"xmon-samples-{os.getpid()}")


COUNT_TRACE = """
import resource, sys
from pathlib import Path
from xmon.execution.xplane import count_files
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    counts = count_files([sys.argv[1]], Path(sys.argv[1]).parent)
    outcome = f"counted {sum(counts.values())}"
except Exception as exc:  # TraceRefused, naming its bound
    outcome = f"refused {getattr(exc, 'bound', repr(exc))}"
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(outcome, grown)
"""


@pytest.mark.parametrize(("kind", "outcome"), [("repeated", "counted"), ("ids", "refused")])
def test_a_large_trace_is_read_in_pieces(tmp_path: Path, kind: str, outcome: str) -> None:
    """A job's trace of 96 MiB: read whole it took several times its size (a 197 MiB one
    ended a daemon limited to 1 GiB). Read a plane header and a MiB of events at a time, its
    executions are counted, or it is refused at a bound, holding a fraction of it."""
    if kind == "repeated":  # one plane's runs again and again: one program, 100,000 runs
        plane = stepping_space(100_000, period_ms=1)
    else:  # every event its own program, run and device: past the 4,096 programs it may hold
        plane = distinct_ids_space(4 << 20)
    trace = tmp_path / "host.xplane.pb"
    with trace.open("wb") as file:
        while file.tell() < 96 << 20:
            file.write(plane)
    result = subprocess.run([sys.executable, "-c", COUNT_TRACE, str(trace)], capture_output=True,
                            text=True, timeout=240, check=True)  # fmt: skip
    said, grown = result.stdout.split()[:-1], int(result.stdout.split()[-1])
    assert said[0] == outcome, result.stdout
    assert grown < 160 << 20, f"{grown >> 20} MiB held to read a 96 MiB trace"


def test_samples_slow_to_read_from_64_jobs_leave_a_new_agent_welcomed_at_once(
    tmp_path: Path,
) -> None:
    """64 jobs each send a sample that takes ~0.1 s to read (10,000 ops) every 2 s. Read in the
    daemon's shared thread pool, they held it and the GIL: a new agent's welcome came 23 s
    later, scrapes took 1.5 s. Now one thread reads them, at most half of a core, and past 32
    waiting a sample is dropped and counted (``ledger_waiting``)."""
    daemon = config_daemon(tmp_path)
    sample = in_part_frames(execution_sample(stepping_space(10_000, period_ms=1)))
    streams = [
        RawStream(daemon.socket_path, samples_every(5000 + i, sample, 2.0)) for i in range(64)
    ]
    try:
        wait_for(lambda: 'pid="5063"' in daemon.scrape(), 60, "64 jobs attached")
        time.sleep(6.0)  # three rounds of samples
        welcomes, scrapes = [], []
        for pid in range(6000, 6003):
            started = time.monotonic()
            agent = RawStream(daemon.socket_path, [hello(pid)], keepalive=0.5)
            try:
                assert next(agent.call).WhichOneof("kind") == "welcome"
                welcomes.append(time.monotonic() - started)
            finally:
                agent.close()
            scrapes.append(scrape_seconds(daemon.metrics_url))
            time.sleep(1.0)
        assert max(welcomes) < 2.0, welcomes
        assert max(scrapes) < 1.0, scrapes
        assert refused(daemon.scrape()).get("ledger_waiting", 0) >= 1
        assert daemon.alive() and "Traceback" not in daemon.log()
    finally:
        for stream in streams:
            stream.close()
        daemon.stop()
