"""Device memory on CPU (live buffers) against the job's own count, through the real agent.

Each job (tests/fidelity/memory_jobs.py) runs on 4 CPU devices with the agent attached to a
real daemon, records every memory reading the agent publishes, and counts its own arrays'
bytes per device. Every reading taken once the job holds its arrays must be within 2 % of
that count, during training too; at least one case is checked on the daemon's /metrics.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.procs import Daemon, Proc, base_env, json_written, spawn, wait_for

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parent / "memory_jobs.py"
TOLERANCE = 0.02

_started: list[Proc] = []


@pytest.fixture(autouse=True)
def _kill_leftover_jobs() -> Iterator[None]:
    yield
    while _started:
        _started.pop().stop(signal.SIGKILL)


def run_job(
    tmp_path: Path, daemon: Daemon, case: str, *flags: str
) -> tuple[Proc, dict[str, Any], Path]:
    """Start a job, wait for its results; it then rests until ``<out>.stop`` exists."""
    out = tmp_path / f"{case}.json"
    env = base_env(XMON_SOCKET=str(daemon.socket_path), JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # the job sets its own device count
    job = spawn([sys.executable, str(JOBS), case, str(out), *flags], tmp_path / f"{case}.log", env)
    _started.append(job)

    def written() -> Any:
        assert job.alive(), job.log()
        return json_written(out)

    return job, wait_for(written, 180, f"the {case} job's results"), out


def finish(job: Proc, out: Path) -> None:
    out.with_name(out.name + ".stop").touch()
    assert job.popen.wait(60) == 0, job.log()


def off_by(reading: dict[str, int], truth: dict[str, int]) -> float:
    return max(abs(reading[d] - truth[d]) / truth[d] for d in truth)


def check_readings(result: dict[str, Any]) -> None:
    truth, since = result["truth"], result["truth_since"]
    taken = [(t, r) for t, r in result["readings"] if t >= since]
    during = [(t, r) for t, r in taken if t < result["rest_since"]]
    assert len(during) >= 5, f"too few readings while the job ran: {len(during)}"
    wrong = [(t, r) for t, r in taken if off_by(r, truth) > TOLERANCE]
    assert not wrong, f"truth {truth}; {len(wrong)}/{len(taken)} readings off: {wrong[:3]}"


def test_data_parallel_arrays_count_each_buffer_once_on_metrics(
    tmp_path: Path, daemon: Daemon
) -> None:
    """A sharded batch (whose shards the job read back) and replicated parameters: every
    reading and the daemon's gauge per device at rest equal the job's own count."""
    job, result, out = run_job(tmp_path, daemon, "data_parallel")
    check_readings(result)
    truth = result["rest_truth"]

    def scraped() -> dict[str, float] | None:
        values = _gauge(daemon.scrape(), "xmon_job_device_memory_in_use_bytes")
        return values if len(values) == 4 else None

    values = wait_for(scraped, 30, "4 devices' memory on /metrics")
    assert off_by({d: int(v) for d, v in values.items()}, truth) <= TOLERANCE, (values, truth)
    finish(job, out)


@pytest.mark.alone  # readings are paced by their CPU cost: a busy host gets too few of them
@pytest.mark.parametrize("markers", [True, False], ids=["marked-steps", "no-markers"])
def test_donated_training_memory_is_never_read_mid_step(
    tmp_path: Path, daemon: Daemon, markers: bool
) -> None:
    """State donated to every step: no published reading misses it, marked or not."""
    job, result, out = run_job(tmp_path, daemon, "donated", *(["--markers"] if markers else []))
    assert result["steps"] > 100
    check_readings(result)
    rest = [r for t, r in result["readings"] if t >= result["rest_since"]]
    assert rest and off_by(rest[-1], result["rest_truth"]) <= TOLERANCE
    finish(job, out)


@pytest.mark.alone  # readings are paced by their CPU cost: a busy host gets too few of them
@pytest.mark.parametrize("markers", [True, False], ids=["marked-steps", "no-markers"])
def test_flax_nnx_state_is_counted_once(tmp_path: Path, daemon: Daemon, markers: bool) -> None:
    """nnx.jit writes the new state back after its jitted call, while the old is alive. With
    xmon.step() around the step, readings come at step ends; without, never inside the
    wrapper's call. Every reading is right."""
    flags = ["--markers"] if markers else []
    job, result, out = run_job(tmp_path, daemon, "nnx", *flags, "--seconds", "8")
    assert result["steps"] > 50
    check_readings(result)
    finish(job, out)


def _gauge(text: str, name: str) -> dict[str, float]:
    """Values by device label of one metric in a /metrics page."""
    values = {}
    for line in text.splitlines():
        if line.startswith(name + "{") and 'job_name="fidelity-' in line:
            labels = line[line.index("{") + 1 : line.index("}")]
            device = dict(p.split("=", 1) for p in labels.split(","))["device"].strip('"')
            values[device] = float(line.rsplit(" ", 1)[1])
    return values
