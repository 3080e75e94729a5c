"""The pathology suite: real JAX jobs (4 CPU devices) against a real daemon, each producing
its finding with the right cause, and a healthy job with eager initialisation producing none
at warning or worse. ``xmon doctor``'s text and exit status are checked on the way.

All jobs run at once against one daemon, so the suite takes about a minute.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pathology_jobs as scripts
import pytest
from job_suite import JobSuite, job_suite

from xmon.model import Finding, Job

from support.host_load import assert_host_bound_verdict_holds
from support.procs import REPO, base_env, wait_for

# The module's jobs share one daemon; host_bound's verdict (a warning, or info on a host whose
# other processes hold the cores) judges the host's CPUs, so they run alone.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("diagnosis"), pytest.mark.alone]

JOBS = {
    "storm": scripts.GROWING_SHAPE,
    "batch": scripts.LATE_BATCH_SHAPE,
    "partial": scripts.PARTIAL_REBUILT,
    "stall": scripts.STALL_IN_LOCK,
    "callback": scripts.STALL_IN_CALLBACK,
    "hostbound": scripts.HOST_BOUND,
    "healthy": scripts.HEALTHY,
}
# From the start of all jobs, jax's start-up included: how long to wait. Each finding must
# come within 60 s of its job's attach (job_suite.ATTACH_TO_FINDING_SECONDS).
FINDING_SECONDS = 90


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobSuite]:
    root = tmp_path_factory.mktemp("diagnosis")
    with job_suite(root, JOBS, FINDING_SECONDS, XMON_LEDGER_INTERVAL="3") as jobs:
        yield jobs


def test_a_growing_shape_is_a_recompile_storm_of_that_function(suite: JobSuite) -> None:
    _, finding = suite.finding("storm", "recompile")
    assert finding.subject == "jit_train_step" and finding.severity in ("warning", "error")
    assert "shape changes between calls" in finding.summary
    assert "shape: arg 0 float32[" in dict(finding.evidence)["change 1"]
    assert "bucket" in finding.fix
    doctor = suite.doctor("--job", "storm")
    assert doctor.returncode == 1, doctor.stderr
    assert "recompile: jit_train_step recompiled" in doctor.stdout
    # the alerts' series: the finding on /metrics, with its kind and severity
    series = re.compile(r'^xmon_job_finding\{.*job_name="storm".*kind="recompile".*\} ([0-9.]+)$',
                        re.M)  # fmt: skip
    assert (found := series.search(suite.daemon.scrape())) and float(found[1]) >= 1


def test_a_batch_shape_changing_after_97_leaves_is_named_with_its_fix(suite: JobSuite) -> None:
    _, finding = suite.finding("batch", "recompile")
    assert finding.subject == "jit_train_step"
    assert "shape changes between calls" in finding.summary, finding.summary
    assert "shape: arg 97 int32[8," in dict(finding.evidence)["change 1"], finding.evidence
    assert "bucket" in finding.fix


def test_a_partial_rebuilt_every_step_names_the_function_object(suite: JobSuite) -> None:
    job, finding = suite.finding("partial", "recompile")
    assert finding.subject == "jit_scaled_loss"
    assert "function changes between calls" in finding.summary
    assert "outside the loop" in finding.fix
    assert job.compile.steady_recompiles_total >= 3


def test_a_stall_in_a_lock_shows_the_main_thread_waiting(suite: JobSuite) -> None:
    suite.finding("stall", "stall")

    # The daemon's clock may find the stall a report before the agent's own rule sends the
    # stacks (each measures from the last step it saw): the stacks follow within a report.
    def with_stacks() -> tuple[Job, Finding] | None:
        job = suite.job("stall")
        hit = [f for f in job.findings if f.kind == "stall" and f.detail] if job else []
        return (job, hit[0]) if job is not None and hit else None

    job, finding = wait_for(with_stacks, 15, "the stall's thread stacks", interval=0.5)
    assert finding.severity == "warning" and (finding.value or 0) > 20
    assert "wait_for_the_loader" in finding.detail, finding.detail
    assert "Thread MainThread" in finding.detail
    assert (job.steps.seconds_since_last_step or 0) > 20
    # stopped between computations: the execution ledger saw train_step start last
    last = dict(finding.evidence)["last program dispatched"]
    assert re.fullmatch(r"jit_train_step \(the last the execution ledger saw start, \d+ s ago\)",
                        last), last  # fmt: skip
    doctor = suite.doctor("--job", "stall", "--json")
    assert doctor.returncode == 1 and '"kind": "stall"' in doctor.stdout


def test_a_stall_inside_a_computation_names_the_program(suite: JobSuite) -> None:
    _, finding = suite.finding("callback", "stall")
    assert "read_batch" in finding.detail, finding.detail  # the blocked host callback
    last = dict(finding.evidence)["last program dispatched"]
    assert last == "jit_train_step (the stepping thread is inside this call now, from its stack)"


def test_a_host_bound_loop_is_found_by_its_busy_ratio(suite: JobSuite) -> None:
    job, finding = suite.finding("hostbound", "host_bound")
    assert_host_bound_verdict_holds(finding, job.pid)  # a warning, unless the host is shared
    assert "waits for the host" in finding.summary
    if finding.severity == "warning":
        assert "waits for input" in finding.fix  # the process sleeps rather than computes
    assert job.devices and max(d.busy_ratio or 0.0 for d in job.devices) < 0.5


def test_a_healthy_job_with_eager_init_has_no_warning(suite: JobSuite) -> None:
    def judged() -> Job | None:
        job = suite.job("healthy")
        ready = job is not None and job.steps.steps_total >= 30 and job.ledger.samples >= 2
        return job if ready else None

    job = wait_for(judged, FINDING_SECONDS, "the healthy job to step and be sampled", 1.0)
    assert job.compile.eager_compiles_total >= 5, job.compile
    assert job.compile.recompiles_total > 0, "eager init compiled ops at several shapes"
    assert job.compile.steady_recompiles_total == 0
    serious = [f for f in job.findings if f.severity != "info"]
    assert serious == [], serious
    doctor = suite.doctor("--job", "healthy")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "healthy (pid" in doctor.stdout and "no problems found" in doctor.stdout


def test_doctor_without_a_daemon_says_so_in_one_line(tmp_path: Path) -> None:
    env = base_env(XMON_SOCKET=str(tmp_path / "none.sock"))
    done = subprocess.run([sys.executable, "-m", "xmon", "doctor"], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("xmon doctor: no xmon daemon is answering")
