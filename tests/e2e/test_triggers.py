"""Triggered captures: the rules on synthetic snapshots, then a real job with an injected slow
step next to a steady one, against a real daemon."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.procs import wait_for
from support.profiling_procs import profiling_daemon, run_stepping_job, xmon_cli


def steady(n: int) -> tuple[float, ...]:
    return tuple(0.1 + 0.001 * (i % 5) for i in range(n))


# --- end to end ---------------------------------------------------------------------------


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
        found = wait_for(lambda: list(notes.glob("*/xmon_capture.json")), 90, "a triggered trace")
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
