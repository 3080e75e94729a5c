"""The wall-time account against a job that times itself (goodput_job.py): start-up, compiles
(a warm-up and one inside a step), real Orbax saves, a 10 s stall, its stepping and an idle
tail, each within 2 % of the job's wall time or 0.5 s, whichever is larger; the buckets sum to
the wall time within 0.5 %. How stepping splits into productive and host-wait time is the
profiler's to see: the job brackets it. Read from the daemon's snapshot while the job idles
after its last step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from xmon.findings.host_bound import on_shared_host
from xmon.model import Goodput, Job
from xmon.wire.client import DaemonClient

from support.procs import Daemon, json_written, start_job, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from dashboards.alerts import ALERTS  # noqa: E402

pytestmark = pytest.mark.e2e

JOB = Path(__file__).with_name("goodput_job.py")
REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "dashboards" / "alerts" / "xmon.rules.yml"
LOW_GOODPUT = next(a.expr for a in ALERTS if a.name == "XmonJobLowGoodput")
# The job dashboard's goodput row, with Grafana's variables as "All" sends them.
GOODPUT_PANEL_QUERIES = (
    'xmon_job_goodput_ratio{instance=~".*", job_name=~".*", window=~"life|5m|1h"}',
    'xmon_job_wall_seconds{instance=~".*", job_name=~".*"}',
    'rate(xmon_job_wall_seconds{instance=~".*", job_name=~".*", bucket!="productive"}[1m])',
)
HEALTHY = r"""
import os, time
import jax, jax.numpy as jnp
import xmon

step = jax.jit(lambda w, x: jnp.tanh(x @ w))
w = jnp.ones((512, 512)) / 512
x = jnp.ones((512, 512))
while not os.path.exists(os.environ["JOB_STOP"]):
    with xmon.step():
        x = step(w, x)
        x.block_until_ready()
"""
IDLE_SECONDS = 4.0  # read once the tail has idled this long (the stall threshold is 2 s)


def run_goodput_job(
    tmp_path: Path, daemon: Daemon, marked: bool, while_idle: Callable[[], None] = lambda: None
) -> tuple[Goodput, dict[str, Any]]:
    name = "goodput" if marked else "goodput_unmarked"
    truth_path = tmp_path / f"{name}.json"
    args = [str(JOB), str(truth_path), str(tmp_path / "checkpoints"), "1" if marked else "0"]
    script = f"import runpy, sys\nsys.argv = {args!r}\n"
    script += f"runpy.run_path({str(JOB)!r}, run_name='__main__')\n"
    job = start_job(tmp_path, daemon.socket_path, script, name, period=0.5,
                    XMON_LEDGER_INTERVAL="2", XMON_LEDGER_DURATION="1")  # fmt: skip
    try:

        def written() -> Any:
            assert job.alive(), job.log()
            return json_written(truth_path)

        truth = wait_for(written, 240, "the job's last step", 0.5)
        with DaemonClient(daemon.socket_path) as client:

            def idle_account() -> tuple[Job, Goodput] | None:
                jobs = [j for j in client.get_snapshot().jobs if j.job_name == name]
                goodput = jobs[0].goodput if jobs else None
                if goodput is None or goodput.ratio is None:
                    return None
                as_of = truth["process_start"] + goodput.wall_seconds
                return (jobs[0], goodput) if as_of - truth["last_end"] >= IDLE_SECONDS else None

            _, goodput = wait_for(idle_account, 30, "the account of the idle tail", 0.5)
        while_idle()
        Path(f"{truth_path}.stop").touch()
        assert job.popen.wait(30) == 0, job.log()
    finally:
        if job.alive():
            job.stop()
    assert "Traceback" not in job.log(), job.log()
    return goodput, truth


def _job_names(result: list[dict[str, Any]]) -> set[str]:
    """The job names of a query's samples or of active alerts."""
    return {(item.get("metric") or item["labels"]).get("job_name", "") for item in result}


def near(value: float, truth: float, wall: float) -> bool:
    return abs(value - truth) <= max(0.02 * wall, 0.5)


def test_every_second_of_a_marked_job_is_where_it_went(
    tmp_path: Path, daemon: Daemon, prometheus_for: Any
) -> None:
    """Beside it, a healthy twin (steps only) on the same daemon, and a real Prometheus with
    the shipped rules: the dashboard's goodput queries return data for both, and the low
    goodput alert's condition holds for the job that stalls, saves and idles, not the twin
    (but where the twin's own start-up holds its first minutes under the floor, or its threads
    wait for a CPU the host's other processes hold): Prometheus
    holds the alert pending for it (it fires once that has lasted its ``for:``, 15 minutes,
    which dashboards/alerts/xmon.rules.test.yml tests with promtool)."""
    prometheus = prometheus_for([f"127.0.0.1:{daemon.metrics_port}"], [RULES])
    twin = start_job(tmp_path, daemon.socket_path, HEALTHY, "healthy", period=0.5,
                     JOB_STOP=str(tmp_path / "healthy.stop"))  # fmt: skip

    def judged_by_prometheus() -> None:
        assert twin.alive(), twin.log()
        both = {"goodput", "healthy"}
        for expr in GOODPUT_PANEL_QUERIES:
            wait_for(lambda e=expr: _job_names(prometheus.query(e)) >= both, 60, expr, 1.0)
        low = wait_for(lambda: prometheus.query(LOW_GOODPUT), 30, "the low goodput condition", 1.0)
        assert "goodput" in _job_names(low) and _young_twin_at_most(low), low
        alerts = wait_for(lambda: prometheus.alerts("XmonJobLowGoodput"), 30,
                          "the low goodput alert to be pending", 1.0)  # fmt: skip
        assert "goodput" in _job_names(alerts) and _young_twin_at_most(alerts), alerts
        assert {a["state"] for a in alerts} == {"pending"}, alerts

    def _young_twin_at_most(result: list[dict[str, Any]]) -> bool:
        """No job but the one that stalls, unless it is the twin and either its own start-up
        holds its first minutes under the floor (its 5-minute window still holds the whole of
        its life, and a busy machine starts jax slowly: stepping, it is productive), or the
        daemon sees its threads wait for a CPU the host's other processes hold (its devices
        then wait on the host's load, as the low_goodput finding says at info)."""
        others = _job_names(result) - {"goodput"}
        if not others:
            return True
        if others != {"healthy"}:
            return False
        with DaemonClient(daemon.socket_path) as client:
            snapshot = client.get_snapshot()
        twin_job = next((j for j in snapshot.jobs if j.job_name == "healthy"), None)
        if twin_job is not None and on_shared_host(twin_job, None, snapshot.host):
            return True
        seconds = {
            sample["metric"]["bucket"]: float(sample["value"][1])
            for sample in prometheus.query('xmon_job_wall_seconds{job_name="healthy"}')
        }
        floor = float(prometheus.query("xmon_daemon_goodput_floor_ratio")[0]["value"][1])
        stepping = sum(seconds.values()) - seconds.get("startup", 0.0)
        return stepping > 0 and seconds.get("productive", 0.0) / stepping >= floor

    try:
        goodput, truth = run_goodput_job(tmp_path, daemon, marked=True,
                                         while_idle=judged_by_prometheus)  # fmt: skip
    finally:
        (tmp_path / "healthy.stop").touch()
        twin.popen.wait(30)
    wall = goodput.wall_seconds
    got = dict(goodput.seconds)
    as_of = truth["process_start"] + wall
    expected = {
        "startup": truth["first_step"]
        - truth["process_start"]
        - (truth["compile"] - truth["compile_in_steps"]),
        "compile": truth["compile"],
        "checkpoint_save": truth["save"],
        "stall": truth["stall"],
        "idle": as_of - truth["last_end"],
    }
    stepping = (truth["last_end"] - truth["first_step"] - truth["compile_in_steps"]
                - truth["save"] - truth["stall"])  # fmt: skip
    report = {k: (round(got.get(k, 0.0), 2), round(v, 2)) for k, v in expected.items()}
    report["steps"] = (round(got["productive"] + got["host_wait"], 2), round(stepping, 2))
    print(f"goodput, marked: (xmon, the job's own) seconds {report}, wall {wall:.2f} s, "
          f"productive {got['productive']:.2f} s, the job's matmul calls "
          f"{truth['device_seconds']:.2f} s")  # fmt: skip
    for bucket, (value, own) in report.items():
        assert near(value, own, wall), (bucket, report, got)
    # Productive is stepping with the devices busy, as the profiler sees their ops: the job
    # cannot time that itself, but it brackets it. Its calls of the one matmul a step hold the
    # device's work and more (dispatch, the wait for the result); while it sleeps on the host
    # in each step, the device has nothing to do.
    tolerance = max(0.02 * wall, 0.5)
    assert got["productive"] <= truth["device_seconds"] + tolerance, (got, truth)
    assert got["host_wait"] >= truth["host_sleep"] - tolerance, (got, truth)
    assert got["productive"] >= 0.5 * truth["device_seconds"], (got, truth)
    assert got["checkpoint_restore"] == got["unattributed"] == got["steps_unmeasured"] == 0.0
    assert sum(got.values()) == pytest.approx(wall, rel=0.005)
    assert goodput.ratio == pytest.approx(got["productive"] / wall)
    assert goodput.steps_marked and goodput.biggest_badput in expected


def test_a_job_without_markers_is_stepping_from_its_first_compile(
    tmp_path: Path, daemon: Daemon
) -> None:
    """No step clock: start-up ends at the first compile, and the stall and idle tail cannot be
    told from stepping (docs/goodput.md); compiles and checkpoints are still exact."""
    goodput, truth = run_goodput_job(tmp_path, daemon, marked=False)
    wall = goodput.wall_seconds
    got = dict(goodput.seconds)
    assert not goodput.steps_marked
    assert near(got["startup"], truth["first_compile"] - truth["process_start"], wall), got
    assert near(got["compile"], truth["compile"], wall), (got, truth)
    assert near(got["checkpoint_save"], truth["save"], wall), (got, truth)
    assert got["stall"] == got["idle"] == 0.0
    assert sum(got.values()) == pytest.approx(wall, rel=0.005)


@pytest.fixture(autouse=True)
def _quiet_orbax() -> None:
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "1")


RESTARTED = r"""
import json, os, sys, time
import jax, jax.numpy as jnp
import xmon

out = os.environ["JOB_TRUTH"]
step = jax.jit(lambda x: jnp.tanh(x @ x))
x = jnp.ones((256, 256)) / 256
first = None
for _ in range(40):
    begun = time.time()
    with xmon.step():
        x = step(x)
        x.block_until_ready()
    first = first or begun
    last = time.time()
with open(out, "w") as f:
    json.dump({"first_step": first, "last_end": last}, f)
while os.environ.get("JOB_WAIT") and not os.path.exists(out + ".stop"):
    time.sleep(0.1)
"""


def test_a_restart_under_the_same_job_key_costs_its_gap(tmp_path: Path, daemon: Daemon) -> None:
    """The job stops and starts again under the same declared job key: the new process's
    restart cost is the gap from the old one's last step to its own first."""
    truths = [tmp_path / "first.json", tmp_path / "second.json"]
    first = start_job(tmp_path, daemon.socket_path, RESTARTED, "restarted", period=0.5,
                      XMON_JOB_KEY="run-42", JOB_TRUTH=str(truths[0]))  # fmt: skip
    assert first.popen.wait(120) == 0, first.log()
    time.sleep(1.0)  # the daemon has seen its stream end
    second = start_job(tmp_path, daemon.socket_path, RESTARTED, "restarted", period=0.5,
                       XMON_JOB_KEY="run-42", JOB_TRUTH=str(truths[1]), JOB_WAIT="1")  # fmt: skip
    try:
        wait_for(lambda: truths[1].exists() or not second.alive(), 120, "the second run's steps")
        with DaemonClient(daemon.socket_path) as client:

            def restart() -> float | None:
                jobs = [j for j in client.get_snapshot().jobs if j.pid == second.popen.pid]
                goodput = jobs[0].goodput if jobs else None
                return goodput.restart_seconds if goodput is not None else None

            lost = wait_for(restart, 30, "the restart's cost")
        Path(f"{truths[1]}.stop").touch()
        assert second.popen.wait(30) == 0, second.log()
    finally:
        if second.alive():
            second.stop()
    own = json.loads(truths[1].read_text())["first_step"] - json.loads(truths[0].read_text())[
        "last_end"]  # fmt: skip
    assert abs(lost - own) <= 0.5, (lost, own)
