"""One multi-process JAX job seen as one job, with no fault: each process reports one job key
and its own index, every fleet panel returns data, and for five minutes no fleet alert fires
and the fleet view sees no trouble (tests/fleet/running_fleet.py has the job)."""

from __future__ import annotations

import os
import time

import pytest
from running_fleet import (
    HEALTHY_SECONDS,
    PROCESSES,
    Fleet,
    panel_queries,
)

from support.procs import prometheus_binary, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(prometheus_binary() is None, reason="prometheus not installed"),
    pytest.mark.xdist_group("fleet-healthy"),  # one job for the module's tests
]


def test_every_process_reports_one_job_key_and_its_own_index(running: Fleet) -> None:
    infos = [s["metric"] for s in running.prometheus.query("xmon_job_fleet_info")]
    assert len(infos) == PROCESSES
    assert len({m["job_key"] for m in infos}) == 1, infos
    assert sorted(int(m["process_index"]) for m in infos) == list(range(PROCESSES))
    assert {m["process_count"] for m in infos} == {str(PROCESSES)}
    # the job's info series says the same as its fleet identity (the hello came too early)
    jobs = running.prometheus.query("xmon_job_info")
    assert sorted(int(s["metric"]["process_index"]) for s in jobs) == list(range(PROCESSES))


def test_the_fleet_dashboard_panels_show_every_process(running: Fleet) -> None:
    def missing() -> list[tuple[str, str]]:
        return [(title, expr) for title, expr in panel_queries()
                if "xmon_job_stalled" not in expr  # only while stalled: the hang test's
                and not running.prometheus.query(expr)]  # fmt: skip

    wait_for(lambda: not missing(), 30, "every fleet panel to return data", interval=2)


@pytest.mark.slow(HEALTHY_SECONDS + 60)  # and the job's start
def test_no_fault_fires_nothing_for_five_minutes(running: Fleet) -> None:
    worst: dict[str, float] = {}
    deadline = time.monotonic() + HEALTHY_SECONDS
    while time.monotonic() < deadline:
        running.alive()
        assert running.alerts("firing") == [], running.fleet_text()
        for sample in running.prometheus.query("xmon:job_process:step_host_excess_ratio"):
            index = sample["metric"]["process_index"]
            worst[index] = max(worst.get(index, 0.0), float(sample["value"][1]))
        if os.environ.get("XMON_FLEET_VERBOSE"):
            print(running.fleet_text(), flush=True)
        time.sleep(5)
    code, verdicts = running.fleet_view()
    assert code == 0 and len(verdicts) == 1, running.fleet_text()
    verdict = verdicts[0]
    assert verdict["straggler"] is None and verdict["hang_first"] == [], verdict
    assert verdict["missing"] == [] and len(verdict["processes"]) == PROCESSES
    running.notes.append(f"healthy: largest host excess per process {worst}")
    print("\n".join(running.notes))
