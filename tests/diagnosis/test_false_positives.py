"""False positives: healthy jobs, watched for 5 minutes by daemons with default detectors and
triggers, must raise no finding at warning or worse and no triggered capture.

All at once, to keep the run near 6 minutes: under daemon A a healthy MLP, a transformer with
eager initialisation and donated parameters, and a job stopped and started again midway; under
daemon B an MLP whose daemon is stopped (SIGTERM) and started again on the same socket midway.
Every few seconds both daemons' snapshots are read; /metrics at the end.

The pathologies' healthy twins (tests/diagnosis/twin_jobs.py: each pathology job with its
problem fixed) are watched the same way, in a run of their own.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import healthy_jobs as scripts
import pytest
from twin_jobs import TWINS

from xmon.findings.tracker import severity_rank
from xmon.model import Snapshot
from xmon.wire.client import DaemonClient, DaemonUnavailable

from support.procs import Daemon, Proc, start_daemon, start_job

pytestmark = pytest.mark.e2e

RUN_SECONDS = 300.0
SAMPLE_SECONDS = 3.0
DEVICES = 2  # four jobs at once on a small host
TRIGGERED = ("step_time", "memory")
TRIGGERED_CAPTURES = re.compile(
    r'^xmon_job_captures_total\{[^}]*trigger="(step_time|memory)"', re.MULTILINE
)


@dataclass
class Watch:
    samples: int = 0
    serious: list[str] = field(default_factory=list)
    captures: set[str] = field(default_factory=set)  # each capture once, however often seen
    seen: dict[tuple[str, int], tuple[float, float, int]] = field(default_factory=dict)

    def read(self, daemon: Daemon, now: float) -> None:
        try:
            with DaemonClient(daemon.socket_path) as client:
                snapshot = client.get_snapshot()
        except DaemonUnavailable:
            return  # daemon B while it restarts
        self.samples += 1
        self._judge(snapshot, now)

    def _judge(self, snapshot: Snapshot, now: float) -> None:
        for job in snapshot.jobs:
            key = (job.job_name, job.pid)
            first = self.seen.get(key, (now, now, 0))[0]
            self.seen[key] = (first, now, job.steps.steps_total)
            for f in job.findings:
                if severity_rank(f.severity) >= severity_rank("warning"):
                    self.serious.append(f"{job.job_name} at {now:.0f} s: {f.kind} {f.summary}")
            for c in job.captures:
                if c.trigger in TRIGGERED and (c.ok_total or c.failed_total):
                    self.captures.add(f"{job.job_name} {job.pid}: {c.trigger} {c.last_reason}")

    def job_minutes(self) -> float:
        return sum(last - first for first, last, _ in self.seen.values()) / 60


@pytest.mark.slow(330)
def test_healthy_jobs_raise_nothing_for_five_minutes(tmp_path: Path) -> None:
    daemon_a = start_daemon(tmp_path / "a")
    daemon_b = start_daemon(tmp_path / "b")
    daemons = [daemon_a, daemon_b]
    procs: list[Proc] = []

    def job(daemon: Daemon, script: str, name: str, seconds: float, run: int = 0) -> Proc:
        stop = tmp_path / f"{name}-{run}.stop"
        proc = start_job(tmp_path, daemon.socket_path, script, name, devices=DEVICES,
                         JOB_STOP=str(stop), JOB_SECONDS=str(seconds))  # fmt: skip
        procs.append(proc)
        return proc

    watch = Watch()
    started = time.monotonic()
    try:
        job(daemon_a, scripts.MLP, "mlp", RUN_SECONDS)
        job(daemon_a, scripts.TRANSFORMER, "transformer", RUN_SECONDS)
        first = job(daemon_a, scripts.MLP, "restarted", RUN_SECONDS / 2)
        job(daemon_b, scripts.MLP, "daemonrestart", RUN_SECONDS)
        restarted_job = restarted_daemon = False
        while (now := time.monotonic() - started) < RUN_SECONDS:
            if not restarted_job and now >= RUN_SECONDS / 2:
                first.popen.wait(30)  # it stops itself at its deadline
                job(daemon_a, scripts.MLP, "restarted", RUN_SECONDS / 2 - 5, run=1)
                restarted_job = True
            if not restarted_daemon and now >= RUN_SECONDS / 2:
                assert daemon_b.stop() == 0, daemon_b.log()
                daemon_b = daemons[1] = start_daemon(tmp_path / "b")
                restarted_daemon = True
            for daemon in daemons:
                watch.read(daemon, now)
            time.sleep(SAMPLE_SECONDS)
        metrics = daemon_a.scrape() + daemon_b.scrape()
    finally:
        for proc in procs:
            proc.stop()
        for daemon in daemons:
            daemon.stop()
    for proc in procs:
        assert "Traceback" not in proc.log(), proc.log()
    names = {name for name, _ in watch.seen}
    assert names == {"mlp", "transformer", "restarted", "daemonrestart"}, watch.seen
    assert len([k for k in watch.seen if k[0] == "restarted"]) == 2  # two processes
    # each watched long enough, and stepping: the steady-state detectors judged them
    stepped = {k: v[2] for k, v in watch.seen.items()}
    assert all(steps >= 100 for steps in stepped.values()), stepped
    minutes = watch.job_minutes()
    assert minutes >= 4 * RUN_SECONDS / 60 * 0.8, watch.seen
    print(f"false positives: {len(watch.serious)} findings, {len(watch.captures)} triggered "
          f"captures over {minutes:.1f} job-minutes ({watch.samples} snapshots)")  # fmt: skip
    assert watch.serious == [], watch.serious
    assert watch.captures == set(), watch.captures
    assert not TRIGGERED_CAPTURES.search(metrics), TRIGGERED_CAPTURES.findall(metrics)


@pytest.mark.slow(330)
def test_the_pathologies_healthy_twins_raise_nothing_for_five_minutes(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    procs = [
        start_job(tmp_path, daemon.socket_path, script, name, devices=DEVICES,
                  JOB_STOP=str(tmp_path / f"{name}.stop"), JOB_SECONDS=str(RUN_SECONDS))
        for name, script in TWINS.items()
    ]  # fmt: skip
    watch = Watch()
    started = time.monotonic()
    try:
        while (now := time.monotonic() - started) < RUN_SECONDS:
            for proc in procs:
                assert proc.alive(), proc.log()
            watch.read(daemon, now)
            time.sleep(SAMPLE_SECONDS)
        metrics = daemon.scrape()
    finally:
        for proc in procs:
            proc.stop()
        daemon.stop()
    for proc in procs:
        assert "Traceback" not in proc.log(), proc.log()
    stepped = {name: steps for (name, _), (_, _, steps) in watch.seen.items()}
    assert set(stepped) == set(TWINS) and min(stepped.values()) >= 100, stepped
    print(f"healthy twins: {len(watch.serious)} findings, {len(watch.captures)} triggered "
          f"captures over {watch.job_minutes():.1f} job-minutes, steps {stepped}")  # fmt: skip
    assert watch.serious == [], watch.serious
    assert watch.captures == set(), watch.captures
    assert not TRIGGERED_CAPTURES.search(metrics), TRIGGERED_CAPTURES.findall(metrics)
