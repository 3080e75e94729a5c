"""Step sums against the job's own clock, through the real agent and daemon.

The job (memory_jobs.py ``steps``) runs marked steps of uneven length and times them itself:
the first step's start to the last step's end. The daemon's summary must say the same
(``_sum`` within 0.5 %, ``_count`` exactly), and the declared FLOPs per step still arrive.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_memory import _kill_leftover_jobs, finish, run_job  # noqa: F401 - fixture

from support.procs import Daemon, wait_for

pytestmark = pytest.mark.e2e


def _value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and 'job_name="fidelity-steps"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_step_sum_and_count_match_the_jobs_clock(tmp_path: Path, daemon: Daemon) -> None:
    job, result, out = run_job(tmp_path, daemon, "steps", "--seconds", "3")
    own_steps, own_seconds = result["steps_total"], result["step_seconds_total"]
    assert own_steps >= 20

    def summary() -> tuple[float, float, float | None] | None:
        text = daemon.scrape()
        count = _value(text, "xmon_job_step_duration_seconds_count")
        if count != own_steps:
            return None
        total = _value(text, "xmon_job_step_duration_seconds_sum")
        return count, total or 0.0, _value(text, "xmon_job_model_flops_per_step")

    count, total, flops = wait_for(summary, 30, f"{own_steps} steps on /metrics")
    assert total == pytest.approx(own_seconds, rel=0.005), (total, own_seconds)
    assert flops == 1e9  # xmon.step(flops=...) still declares the step's FLOPs
    finish(job, out)
