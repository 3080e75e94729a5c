"""jax's own cache-miss explanation as a second source for the recompile finding: a real job
run with ``JAX_EXPLAIN_CACHE_MISSES=1`` whose input grows each step, against a real daemon."""

from __future__ import annotations

import re
from pathlib import Path

import pathology_jobs as scripts
import pytest

from xmon.model import Finding
from xmon.wire.client import DaemonClient

from support.procs import start_daemon, start_job, wait_for

pytestmark = pytest.mark.e2e


def _recompile(socket: Path, name: str) -> Finding | None:
    with DaemonClient(socket) as client:
        jobs = [j for j in client.get_snapshot().jobs if j.job_name == name]
    hits = [f for j in jobs for f in j.findings if f.kind == "recompile"]
    return hits[0] if hits else None


@pytest.mark.parametrize("explain", [True, False])
def test_jax_explains_the_recompile_in_the_finding(tmp_path: Path, explain: bool) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    stop = tmp_path / "stop"
    env = {"JAX_EXPLAIN_CACHE_MISSES": "1"} if explain else {}
    job = start_job(tmp_path, daemon.socket_path, scripts.GROWING_SHAPE, "storm",
                    JOB_STOP=str(stop), **env)  # fmt: skip
    try:
        finding = wait_for(lambda: _recompile(daemon.socket_path, "storm"), 60,
                           "a recompile finding", interval=1.0)  # fmt: skip
    finally:
        stop.touch()
        job.stop()
        daemon.stop()
    evidence = dict(finding.evidence)
    assert evidence["change 1"].startswith("shape: arg 0 float32[")  # xmon's own diff stands
    if not explain:
        assert "jax explains" not in evidence
        return
    said = evidence["jax explains"]
    # e.g. "TRACING CACHE MISS at .../storm.py:20:8 (<module>): for train_step defined at
    # .../storm.py:13 all previously seen cache keys differ. ... * at x, now f32[19] and
    # before f32[10]" (jax compares with the closest earlier key, not always the latest): it
    # is the newest compile's, whose argument xmon shows as float32[19]
    assert said.startswith("TRACING CACHE MISS at ") and "for train_step defined at" in said
    found = re.search(r"at x, now f32\[(\d+)\] and before f32\[(\d+)\]", said)
    assert found and int(found[2]) < int(found[1]), said
    assert evidence["latest arguments"] == f"float32[{found[1]}]", (said, evidence)
    assert "\n" not in said
    # the job's own log still has jax's warnings: the handler took nothing from it
    assert "TRACING CACHE MISS" in job.log()
