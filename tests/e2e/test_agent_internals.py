"""The agent's one seam to private jax and CPython details (xmon.agent.internals): each private
access, removed or renamed, turns its capability unavailable with a reason, at attach (the
probe) and at run time, and the state reaches /metrics and `xmon doctor` from a real job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.procs import REPO, base_env, start_daemon, start_job, wait_for

# A job that renames the profiler's running-session attribute after the agent attached (as a
# jax release would), then steps: the ledger must say it is unavailable, and the job go on.
RENAMED_JOB = r"""
import os, pathlib, threading, time
import jax, jax.numpy as jnp
import jax._src.profiler as profiler

class Renamed:
    lock = threading.Lock()

profiler._profile_state = Renamed()
step = jax.jit(lambda a: jnp.tanh(a @ a))
a = jnp.ones((64, 64))
stop = pathlib.Path(os.environ["JOB_STOP"])
while not stop.exists():
    step(a).block_until_ready()
    time.sleep(0.01)
print("JOB DONE", flush=True)
"""


def test_a_capability_lost_in_a_real_job_reaches_metrics_and_doctor(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    stop = tmp_path / "job.stop"
    job = start_job(tmp_path, daemon.socket_path, RENAMED_JOB, "renamed", JOB_STOP=str(stop))
    try:
        line = 'xmon_agent_capability_available{capability="ledger",job_name="renamed"'

        def lost() -> str | None:
            text = daemon.scrape()
            return next((s for s in text.splitlines() if s.startswith(line) and
                         s.endswith(" 0.0")), None)  # fmt: skip

        series = wait_for(lost, 90, "the ledger reported unavailable")
        assert "no session attribute" in series, series
        assert 'capability="catalogue",job_name="renamed",pid=' in daemon.scrape()
        env = base_env(XMON_SOCKET=str(daemon.socket_path))

        def doctor() -> str | None:
            done = subprocess.run([sys.executable, "-m", "xmon", "doctor", "--all"],
                                  capture_output=True, text=True, env=env, cwd=REPO,
                                  timeout=60)  # fmt: skip
            return done.stdout if "capability_unavailable" in done.stdout else None

        text = wait_for(doctor, 60, "xmon doctor to name the lost capability", interval=1.0)
        assert "ledger" in text and "no session attribute" in text, text
        stop.touch()
        assert job.popen.wait(60) == 0 and "JOB DONE" in job.log(), job.log()
    finally:
        stop.touch()
        job.stop()
        daemon.stop()
