"""Triggered captures: the rules on synthetic snapshots, then a real job with an injected slow
step next to a steady one, against a real daemon."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from xmon.findings.host_bound import starved
from xmon.wire.client import DaemonClient

from support.procs import Daemon, wait_for
from support.profiling_procs import profiling_daemon, run_stepping_job, xmon_cli


def steady(n: int) -> tuple[float, ...]:
    return tuple(0.1 + 0.001 * (i % 5) for i in range(n))


# --- end to end ---------------------------------------------------------------------------


def _triggered_or_starved(daemon: Daemon, pid: int, notes: Path) -> tuple[list[Path], bool]:
    """The triggered trace's notes within 90 s, and whether the daemon's snapshots showed the
    job waiting for a CPU meanwhile (xmon.findings.host_bound.starved)."""
    starved_seen = False
    deadline = time.monotonic() + 90
    with DaemonClient(daemon.socket_path) as client:
        while time.monotonic() < deadline:
            found = list(notes.glob("*/xmon_capture.json"))
            if found:
                return found, starved_seen
            job = next((j for j in client.get_snapshot().jobs if j.pid == pid), None)
            starved_seen = starved_seen or (job is not None and starved(job.process))
            time.sleep(0.5)
    return [], starved_seen


def test_injected_slow_step_triggers_a_trace_and_a_steady_job_does_not(tmp_path: Path) -> None:
    daemon = profiling_daemon(
        tmp_path / "daemon", triggers=True, trigger_step_time_factor=10.0, trigger_min_steps=15,
        trigger_trace_seconds=0.5, trigger_memory_ratio=0,
    )  # fmt: skip
    jobs = []
    try:
        # Steps are mostly sleep, so a loaded machine does not make a steady step 10x slower.
        steady_job = run_stepping_job(tmp_path / "steady", daemon, "steady", STEP_SLEEP="0.05")
        jobs.append(steady_job)
        slow_job = run_stepping_job(tmp_path / "slow", daemon, "slow", STEP_SLEEP="0.05",
                                    SLOW_STEP_AT="60", SLOW_STEP_SECONDS="2.5")  # fmt: skip
        jobs.append(slow_job)
        tb = Path(daemon.extra_env["XMON_LOGDIR"])
        notes = tb / f"slow-{slow_job.pid}" / "plugins" / "profile"
        found, starved_seen = _triggered_or_starved(daemon, slow_job.pid, notes)
        if not found:
            # The daemon judges no step of a job whose threads wait for a CPU (the host's
            # fault, not the job's): beside other load that is right, and all it may do.
            assert starved_seen, "no triggered trace, and the job never waited for a CPU"
            assert "trigger step_time fired" not in daemon.log()
            return
        note = json.loads(found[0].read_text())
        assert (note["trigger"], note["kind"], note["pid"]) == ("step_time", "trace", slow_job.pid)
        assert re.match(r"step took 2\.\d+ s, \d+\.\d x the median", note["reason"]), note
        assert list(found[0].parent.glob("*.xplane.pb"))
        metric = (f'xmon_job_captures_total{{job_name="slow",kind="trace",pid="{slow_job.pid}",'
                  'trigger="step_time"} 1.0')  # fmt: skip
        wait_for(lambda: metric in daemon.scrape(), 30, "the trigger's capture counter")
        text = daemon.scrape()
        assert 'job_name="steady",kind="trace"' not in text, "the steady job was never traced"
        assert not (tb / f"steady-{steady_job.pid}" / "plugins").exists()
        assert "trigger step_time fired for job 'slow'" in daemon.log()

        def counted() -> list[dict[str, object]]:
            listed = json.loads(xmon_cli(daemon, "programs", "--job", "slow", "--json").stdout)
            return [p for p in listed
                    if p["name"] == "jit_train_step" and p["executions"] is not None]  # fmt: skip

        [step] = wait_for(counted, 30, "executions counted in the triggered trace")
        assert step["executions"] > 0 and 0.5 <= step["executions_window_seconds"] < 2.0, step
    finally:
        for j in jobs:
            assert "RESULT" in j.stop()
        daemon.stop()
