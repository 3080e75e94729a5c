"""Program executions counted in a real trace: a JAX job calls two jitted functions at known
rates, `xmon capture` traces it, and the real daemon's counts reach `xmon programs`, the
snapshot and /metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from support.procs import Daemon, Proc, json_written, start_job, wait_for
from support.profiling_procs import profiling_daemon, xmon_cli

pytestmark = pytest.mark.xdist_group("paced-job")  # its tests share the module's job

FAST, SLOW = 20.0, 5.0  # calls per second of jit_fast and jit_slow
TRACE_SECONDS = 2.0

# Calls fast() FAST times and slow() SLOW times a second on a fixed schedule (each call waits
# for its result, so every call is one execution inside the trace) until JOB_STOP appears.
PACED_JOB = r"""
import json, os, pathlib, time
import jax, jax.numpy as jnp

out = pathlib.Path(os.environ["JOB_OUT"])
stop = pathlib.Path(os.environ["JOB_STOP"])
fast_rate, slow_rate = float(os.environ["FAST"]), float(os.environ["SLOW"])

@jax.jit
def fast(a):
    return jnp.tanh(a @ a)

@jax.jit
def slow(a):
    return jnp.sin(a).sum()

a = jnp.ones((64, 64))
fast(a).block_until_ready(); slow(a).block_until_ready()
out.write_text(json.dumps({"pid": os.getpid()}))
start = time.monotonic()
done_fast = done_slow = 0
while not stop.exists():
    elapsed = time.monotonic() - start
    while done_fast < elapsed * fast_rate:
        fast(a).block_until_ready(); done_fast += 1
    while done_slow < elapsed * slow_rate:
        slow(a).block_until_ready(); done_slow += 1
    time.sleep(0.002)
print(f"RESULT fast={done_fast} slow={done_slow}", flush=True)
"""


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Proc, int]]:
    work = tmp_path_factory.mktemp("executions")
    daemon = profiling_daemon(work / "daemon", capture_min_free_bytes=16 * 1024)
    out, stop = work / "paced.json", work / "paced.stop"
    # The execution ledger off: this job's executions come from captures only.
    job = start_job(work, daemon.socket_path, PACED_JOB, "paced", JOB_OUT=str(out),
                    JOB_STOP=str(stop), FAST=str(FAST), SLOW=str(SLOW),
                    XMON_LEDGER="off")  # fmt: skip
    try:

        def started() -> Any:
            assert job.alive(), job.log()
            return json_written(out)

        yield daemon, job, wait_for(started, 120, "the paced job to start")["pid"]
        stop.touch()
        assert job.popen.wait(60) == 0 and "RESULT" in job.log(), job.log()
    finally:
        job.stop()
        daemon.stop()


def _programs(daemon: Daemon, *args: str) -> list[dict[str, Any]]:
    result = xmon_cli(daemon, "programs", "--job", "paced", "--json", *args)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def _by_name(listed: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in listed}


def test_executions_in_a_trace_reach_programs_and_metrics(paced) -> None:
    daemon, _, pid = paced

    def ids_known() -> bool:
        rows = _by_name(_programs(daemon))
        return all(rows.get(n, {}).get("executions_window_seconds", 0) is None
                   for n in ("jit_fast", "jit_slow"))  # fmt: skip

    wait_for(ids_known, 30, "the job's programs to be reported")
    before = xmon_cli(daemon, "programs", "--job", "paced")
    assert "run `xmon capture` to count executions" in before.stdout, before.stdout

    done = xmon_cli(daemon, "capture", "--job", "paced", "--duration", f"{TRACE_SECONDS}s")
    assert done.returncode == 0, done.stderr

    def counted() -> dict[str, dict[str, Any]] | None:
        rows = _by_name(_programs(daemon, "--sort", "executions"))
        return rows if rows["jit_fast"]["executions"] is not None else None

    rows = wait_for(counted, 30, "executions counted in the trace")
    for name, rate in (("jit_fast", FAST), ("jit_slow", SLOW)):
        row = rows[name]
        window = row["executions_window_seconds"]
        assert TRACE_SECONDS <= window < TRACE_SECONDS + 1.5, row  # the trace's own length
        assert row["executions"] > 0 and row["executions_counted_at"] > 0
        assert row["executions_per_second"] == pytest.approx(row["executions"] / window)
        # a 2-core machine may delay some calls past the trace's end, never add any
        assert 0.6 * rate * window <= row["executions"] <= rate * window + 2, row
    assert rows["jit_fast"]["executions"] > rows["jit_slow"]["executions"]
    listed = _programs(daemon, "--sort", "executions")
    assert [p["name"] for p in listed[:2]] == ["jit_fast", "jit_slow"]

    table = xmon_cli(daemon, "programs", "--job", "paced", "--sort", "executions", "--wide").stdout
    fast_row = next(line for line in table.splitlines() if " jit_fast " in line)
    assert str(rows["jit_fast"]["executions"]) in fast_row.split()
    assert "executions in the job's latest trace capture" in table

    metric = re.compile(
        r'xmon_job_program_executions_per_second\{fingerprint="\w+",job_name="paced",'
        rf'pid="{pid}",program="jit_fast"\}} ([0-9.e+]+)'
    )

    def scraped() -> float | None:
        match = metric.search(daemon.scrape())
        return float(match.group(1)) if match else None

    assert wait_for(scraped, 30, "the executions gauge") == pytest.approx(
        rows["jit_fast"]["executions_per_second"]
    )
