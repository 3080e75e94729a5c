"""Real JAX jobs run at once against one real daemon, and the questions the diagnosis tests
ask of them: a job as the daemon sees it, a finding within the suite's time, ``xmon doctor``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from xmon.model import Finding, Job
from xmon.wire.client import DaemonClient

from support.procs import REPO, Daemon, Proc, base_env, start_daemon, start_job, wait_for

ATTACH_TO_FINDING_SECONDS = 60.0


@dataclass
class JobSuite:
    root: Path
    daemon: Daemon
    procs: dict[str, Proc]
    started: float  # monotonic, when the jobs were started
    finding_seconds: float  # from the start of all jobs, jax start-up included

    def job(self, name: str) -> Job | None:
        with DaemonClient(self.daemon.socket_path) as client:
            snapshot = client.get_snapshot()
        return next((j for j in snapshot.jobs if j.job_name == name), None)

    def finding(self, name: str, kind: str) -> tuple[Job, Finding]:
        def found() -> tuple[Job, Finding] | None:
            if not self.procs[name].alive():
                raise AssertionError(f"job {name} exited:\n{self.procs[name].log()}")
            job = self.job(name)
            hit = [f for f in job.findings if f.kind == kind] if job is not None else []
            return (job, hit[0]) if job is not None and hit else None

        left = self.started + self.finding_seconds - time.monotonic()
        job, finding = wait_for(found, left, f"a {kind} finding for job {name}", interval=1.0)
        # From the job's attach (its agent's clock; the daemon's runs on the same host) to the
        # finding first seen: what the job's own imports and jax's start-up took is not counted.
        latency = finding.since - job.started_at
        print(f"{name}: {kind} finding {latency:.1f} s after the job attached")
        assert 0 <= latency <= ATTACH_TO_FINDING_SECONDS, (name, kind, latency)
        return job, finding

    def doctor(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = base_env(XMON_SOCKET=str(self.daemon.socket_path))
        return subprocess.run([sys.executable, "-m", "xmon", "doctor", *args],
                              capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=60)  # fmt: skip


@contextmanager
def job_suite(
    root: Path, scripts: Mapping[str, str], finding_seconds: float, **env: str
) -> Iterator[JobSuite]:
    """A daemon and every script as a job attached to it; each job stops when its
    ``<name>.stop`` file appears (and writes its truths to ``<name>.truth``)."""
    daemon = start_daemon(root / "daemon")
    procs: dict[str, Proc] = {}
    started = time.monotonic()
    try:
        for name, script in scripts.items():
            procs[name] = start_job(root, daemon.socket_path, script, name,
                                    JOB_STOP=str(root / f"{name}.stop"),
                                    JOB_TRUTH=str(root / f"{name}.truth"), **env)  # fmt: skip
        yield JobSuite(root, daemon, procs, started, finding_seconds)
    finally:
        for name, proc in procs.items():
            (root / f"{name}.stop").touch()
            proc.stop()
        daemon.stop()
