"""End to end with real processes: JAX job (4 CPU devices) → agent → daemon → Prometheus."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.procs import Daemon, Proc, json_written, start_daemon, start_job, wait_for

JOB = r"""
import json, os, pathlib, time
import jax, jax.numpy as jnp
import xmon

out = pathlib.Path(os.environ["JOB_OUT"])
stop = pathlib.Path(os.environ["JOB_STOP"])

@jax.jit
def train_step(a, b):
    return jnp.tanh(a @ b)

a = jnp.ones((256, 128)); b = jnp.ones((128, 64))
keep = [jax.device_put(jnp.ones((4096,)) * i, d) for i, d in enumerate(jax.local_devices())]
with xmon.step():
    r = train_step(a, b)
cost = train_step.lower(a, b).compile().cost_analysis()
xmon.declare_model_flops(per_step=2 * 256 * 128 * 64)
out.write_text(json.dumps({"flops": cost["flops"], "attached": xmon.is_attached()}))
steps = 0
checksum = 0.0
while not stop.exists() and steps < 20000:
    with xmon.step():
        r = train_step(a, b)
    steps += 1
    time.sleep(0.01)
checksum = float(r.sum())
print(f"RESULT steps>0={steps > 0} checksum={checksum:.3f}", flush=True)
"""


_started: list[Proc] = []


@pytest.fixture(autouse=True)
def _kill_leftover_jobs() -> Iterator[None]:
    yield
    while _started:
        _started.pop().stop(signal.SIGKILL)


def _run_job(tmp_path: Path, daemon_socket: Path, name: str = "e2e") -> tuple[Proc, dict]:
    env = {"JOB_OUT": str(tmp_path / "out.json"), "JOB_STOP": str(tmp_path / "stop")}
    job = start_job(tmp_path, daemon_socket, JOB, name, **env)
    _started.append(job)

    def written() -> Any:
        assert job.alive(), job.log()
        return json_written(tmp_path / "out.json")

    return job, wait_for(written, 120, "the job to start")


def _finish(job: Proc, tmp_path: Path) -> str:
    (tmp_path / "stop").touch()
    assert job.popen.wait(60) == 0, job.log()
    return job.log()


def test_job_metrics_reach_prometheus_and_vanish_when_the_job_ends(
    tmp_path: Path, daemon: Daemon, prometheus_for
) -> None:
    prom = prometheus_for([f"127.0.0.1:{daemon.metrics_port}"])
    job, own = _run_job(tmp_path, daemon.socket_path)
    assert own["attached"], "xmon run did not attach the agent"
    sel = '{job_name="e2e"}'

    memory = wait_for(
        lambda: len(v := prom.values(f"xmon_job_device_memory_in_use_bytes{sel}")) == 4 and v,
        60, "memory series of 4 devices in Prometheus",
    )  # fmt: skip
    assert set(memory) == {"0", "1", "2", "3"}
    assert memory["0"] > 0 and all(v >= 0 for v in memory.values())
    compiles = prom.values(f"xmon_job_compiles_total{sel}")
    assert len(compiles) == 1 and next(iter(compiles.values())) > 0
    program = 'xmon_job_program_flops{job_name="e2e",program="jit_train_step"}'
    flops = wait_for(lambda: prom.values(program), 30, "program FLOPs in Prometheus")
    assert list(flops.values()) == [own["flops"]]
    wait_for(lambda: prom.values(f"xmon_job_step_duration_seconds_count{sel}"), 30, "step series")
    mfu = wait_for(
        lambda: prom.values(f"xmon_job_model_flops_utilization_ratio{sel}"), 30, "MFU series"
    )
    assert all(0 < v < 10 for v in mfu.values())
    hfu = wait_for(  # from the execution ledger's first sample
        lambda: prom.values(f"xmon_job_hardware_flops_utilization_ratio{sel}"), 30, "HFU series"
    )
    assert all(0 < v < 10 for v in hfu.values())
    assert prom.values(f"xmon_job_steps_per_second{sel}")

    output = _finish(job, tmp_path)
    assert "RESULT steps>0=True" in output
    # The daemon drops the job's series as soon as its stream ends (period 0.5 s).
    wait_for(lambda: 'job_name="e2e"' not in daemon.scrape(), 1.0 + 1.0, "job series to vanish")
    wait_for(lambda: not prom.query(f"xmon_job_info{sel}"), 10, "Prometheus to mark them stale")


def test_promtool_accepts_a_real_scrape(tmp_path: Path, daemon: Daemon) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    job, _ = _run_job(tmp_path, daemon.socket_path)

    def scrape_with_job() -> str | None:
        text = daemon.scrape()
        return text if "xmon_job_program_flops" in text else None

    text = wait_for(scrape_with_job, 60, "job data")
    check = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
    assert check.returncode == 0 and check.stdout == b"" and check.stderr == b"", check
    _finish(job, tmp_path)


def test_job_survives_daemon_kill_and_reconnects_after_restart(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "d1")
    job, _ = _run_job(tmp_path, daemon.socket_path)
    wait_for(lambda: 'job_name="e2e"' in daemon.scrape(), 30, "the job to report")
    daemon.stop(signal.SIGKILL)
    assert job.alive()
    time.sleep(2.0)  # the agent keeps producing reports with nobody to take them
    restarted = start_daemon(tmp_path / "d1", port=0)
    try:

        def reconnected() -> bool:
            return _value(restarted.scrape(), "xmon_agent_reconnects_total") >= 1

        wait_for(reconnected, 30, "the agent to reconnect to the restarted daemon")
        assert _value(restarted.scrape(), "xmon_agent_reports_dropped_total") > 0
        assert _value(restarted.scrape(), "xmon_job_programs") > 0, "catalogue resent"
        output = _finish(job, tmp_path)
        assert "RESULT steps>0=True" in output
    finally:
        restarted.stop()


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in scrape")
