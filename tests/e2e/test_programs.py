"""The program catalogue: rows from snapshots, then `xmon programs` and `--hlo` against a real
daemon and a real JAX job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.procs import Daemon, wait_for
from support.profiling_procs import Job as RunningJob
from support.profiling_procs import profiling_daemon, run_stepping_job, xmon_cli

# --- end to end ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, RunningJob]]:
    work = tmp_path_factory.mktemp("programs")
    daemon = profiling_daemon(work / "daemon")
    running = None
    try:
        running = run_stepping_job(work / "job", daemon, "progjob")
        yield daemon, running
        running.stop()
    finally:
        if running is not None and running.proc.alive():
            running.proc.stop()
        daemon.stop()


def test_programs_json_has_the_jobs_cost_analysis(live) -> None:
    daemon, running = live

    def listing() -> list[dict] | None:
        result = xmon_cli(daemon, "programs", "--job", "progjob", "--json", "--sort", "bytes")
        assert result.returncode == 0, result.stderr
        listed = json.loads(result.stdout)
        return listed if any(p["name"] == "jit_train_step" for p in listed) else None

    listed = wait_for(listing, 30, "the job's programs to be reported")
    [program] = [p for p in listed if p["name"] == "jit_train_step"]
    assert program["flops"] == running.flops and program["bytes_accessed"] == running.bytes_accessed
    assert program["arithmetic_intensity"] == pytest.approx(running.flops / running.bytes_accessed)
    assert program["ridge_point"] == pytest.approx(1e11 / 2e10)  # the test daemon's CPU peaks
    assert program["bound"] in ("compute", "memory") and program["pid"] == running.pid
    assert program["compile_seconds"] > 0 and program["argument_bytes"] == 2 * 128 * 128 * 4
    assert [p["bytes_accessed"] or 0 for p in listed] == sorted(
        (p["bytes_accessed"] or 0 for p in listed), reverse=True
    )


def test_programs_table_and_hlo_by_fingerprint_prefix(live) -> None:
    daemon, _ = live

    def table() -> str | None:
        done = xmon_cli(daemon, "programs", "--sort", "time")
        assert done.returncode == 0 and done.stdout.startswith("JOB"), done.stderr
        return done.stdout if " jit_train_step " in done.stdout else None

    text = wait_for(table, 30, "the job's programs to be reported")
    row = next(line for line in text.splitlines() if " jit_train_step " in line)
    prefix = row.split()[1]  # the table shows 12 characters of the fingerprint
    hlo = xmon_cli(daemon, "programs", "--hlo", prefix)
    assert hlo.returncode == 0, hlo.stderr
    assert hlo.stdout.startswith("HloModule jit_train_step")
    assert "tanh" in hlo.stdout and "ENTRY" in hlo.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--hlo", "zzzz"), "xmon programs: no program with fingerprint 'zzzz' in job 'progjob'"),
        (("--job", "nope"), "xmon programs: no job named 'nope' is attached to the daemon"),
        (("--hlo", "1", "--job", "nope"), "xmon programs: no job named 'nope'; attached: progjob"),
        (("--limit", "-1"), "xmon programs: --limit must be 0 (all) or more"),
    ],
)
def test_programs_bad_requests(live, args, message) -> None:
    daemon, _ = live
    result = xmon_cli(daemon, "programs", *args)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_no_daemon_is_one_clear_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    from support.procs import REPO, base_env

    env = base_env(XMON_SOCKET=str(tmp_path / "absent.sock"))
    for args in (["programs"], ["capture", "--duration", "1s"]):
        done = subprocess.run([sys.executable, "-m", "xmon", *args], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=60)  # fmt: skip
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "no xmon daemon is answering on" in done.stderr
