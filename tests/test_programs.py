"""The program catalogue: rows from snapshots, then `xmon programs` and `--hlo` against a real
daemon and a real JAX job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from xmon.analysis.peaks import PeakTable
from xmon.cli.programs import executions_note, flops_note, render_table
from xmon.model import (
    DaemonStats,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Program,
    Snapshot,
    Utilization,
)
from xmon.views.catalogue import rows, select_jobs, sort_rows

from procs import Daemon, wait_for
from profiling_procs import Job as RunningJob
from profiling_procs import profiling_daemon, run_stepping_job, xmon_cli


def job(name: str = "train", pid: int = 1, kind: str = "TPU v6 lite", **util: float) -> Job:
    device = JobDevice(DeviceInfo(0, "tpu", kind), DeviceMemory())
    programs = (
        Program("aaaa1111", "jit_matmul", "jit(matmul)", flops=1e12, bytes_accessed=1e9,
                argument_bytes=10, temp_bytes=5, compile_seconds=2.0),
        Program("bbbb2222", "jit_add", "jit(add)", flops=1e6, bytes_accessed=3e6,
                compile_seconds=0.1),
        Program("cccc3333", "jit_custom", None, flops=None, bytes_accessed=None),
    )  # fmt: skip
    return Job(job_name=name, pid=pid, hostname="h", platform="tpu", jax_version="",
               jaxlib_version="", devices=(device,), programs=programs,
               utilization=Utilization(**util))  # fmt: skip


def test_rows_place_each_program_on_the_roofline_of_its_device() -> None:
    by_name = {r.name: r for r in rows([job()])}
    peak = PeakTable().lookup("TPU v6 lite")
    assert peak is not None and peak.memory_bytes_per_second
    ridge = peak.flops_per_second / peak.memory_bytes_per_second  # about 560 FLOP/B
    matmul, add, custom = by_name["jit_matmul"], by_name["jit_add"], by_name["jit_custom"]
    assert matmul.ridge_point == pytest.approx(ridge)
    assert (matmul.arithmetic_intensity, matmul.bound) == (1000.0, "compute")
    assert add.arithmetic_intensity == pytest.approx(1 / 3) and add.bound == "memory"
    assert (custom.arithmetic_intensity, custom.bound) == (None, None), "unknown is not zero"
    assert matmul.executions is None and matmul.device_kind == "TPU v6 lite"


def test_the_daemons_peaks_win_and_unknown_devices_have_no_ridge() -> None:
    configured = job(kind="cpu", peak_flops_per_second=4e11, peak_bytes_per_second=2e11)
    assert {r.ridge_point for r in rows([configured])} == {2.0}
    assert {r.bound for r in rows([job(kind="cpu")])} == {None}


def test_sorting_puts_unknown_last() -> None:
    items = rows([job()])
    assert [r.name for r in sort_rows(items, "flops")] == ["jit_matmul", "jit_add", "jit_custom"]
    assert [r.name for r in sort_rows(items, "bytes")] == ["jit_matmul", "jit_add", "jit_custom"]
    assert [r.name for r in sort_rows(items, "time")] == ["jit_matmul", "jit_add", "jit_custom"]
    assert [r.name for r in sort_rows(items, "executions")][0] == "jit_matmul"


def test_select_jobs_names_what_is_attached() -> None:
    snapshot = Snapshot(1, 0.0, 0.0, "h", DaemonStats("0", 0.0), jobs=(job(), job("eval", 2)))
    assert [j.pid for j in select_jobs(snapshot, "eval", None)] == [2]
    assert len(select_jobs(snapshot, None, None)) == 2
    with pytest.raises(LookupError, match=r"no job named 'x' .*attached: train \(pid 1\), eval"):
        select_jobs(snapshot, "x", None)
    with pytest.raises(LookupError, match="no pid 9 is attached"):
        select_jobs(snapshot, None, 9)


def test_table_has_a_row_per_program_and_dashes_for_unknown() -> None:
    table = render_table(sort_rows(rows([job()], PeakTable()), "flops"), wide=True).splitlines()
    assert table[0].split() == ["JOB", "PID", "FINGERPRINT", "PROGRAM", "FLOPS", "XLA_FLOPS",
                                "LOOPS", "BYTES", "FLOP/B", "RIDGE", "BOUND", "ARGS", "OUT",
                                "TEMP", "CODE", "COMPILE", "EXEC", "EXEC/S",
                                "DEV/EXEC"]  # fmt: skip
    assert table[1].split()[:11] == ["train", "1", "aaaa1111", "jit_matmul", "1T", "-", "0",
                                     "954MiB", "1k", "560", "compute"]  # fmt: skip
    assert table[3].split()[3:8] == ["jit_custom", "-", "-", "0", "-"]


def test_executions_sort_by_rate_and_fill_the_exec_columns() -> None:
    traced = dict(executions_window_seconds=2.0, executions_counted_at=100.0)
    matmul, add, custom = job().programs
    counted = replace(job(), programs=(
        replace(matmul, executions=3, executions_per_second=1.5, **traced),
        replace(add, executions=40, executions_per_second=20.0, **traced),
        custom,  # module ids unknown: not counted
    ))  # fmt: skip
    ordered = sort_rows(rows([counted]), "executions")
    assert [r.name for r in ordered] == ["jit_add", "jit_matmul", "jit_custom"]
    assert (ordered[0].executions, ordered[0].executions_window_seconds) == (40, 2.0)
    table = render_table(ordered, wide=True).splitlines()
    assert table[1].split()[-3:] == ["40", "20", "-"] and table[3].split()[-3:] == ["-"] * 3
    assert "latest trace capture" in executions_note(ordered)
    assert "run `xmon capture`" in executions_note(rows([job()]))


def test_loop_aware_flops_beside_xlas_with_the_lower_bound_marked() -> None:
    matmul, add, custom = job().programs
    looped = replace(job(), programs=(
        replace(matmul, flops_xla=1e11, loops=3, loops_unknown_trip_count=1,
                flops_lower_bound=True),
        replace(add, flops_xla=1e6, loops=1),
    ))  # fmt: skip
    items = sort_rows(rows([looped]), "flops")
    assert (items[0].flops_xla, items[0].loops, items[0].flops_lower_bound) == (1e11, 3, True)
    table = render_table(items, wide=True).splitlines()
    assert table[1].split()[4:7] == ["≥1T", "100G", "3(1?)"]
    assert table[2].split()[4:7] == ["1M", "1M", "1"]
    assert "≥" in flops_note(items) and "≥" not in flops_note(rows([job()]))


def test_ledger_executions_show_device_time_and_say_their_source() -> None:
    sampled = dict(executions_window_seconds=30.0, executions_counted_at=100.0,
                   executions_source="ledger")  # fmt: skip
    matmul, add, _ = job().programs
    counted = replace(job(), programs=(
        replace(matmul, executions=60, executions_per_second=2.0,
                device_seconds_per_execution=0.0123, **sampled),
        replace(add, executions=3, executions_per_second=0.1,
                device_seconds_per_execution=4.5e-6, **sampled),
    ))  # fmt: skip
    items = sort_rows(rows([counted]), "executions")
    assert items[0].executions_source == "ledger"
    table = render_table(items, wide=True).splitlines()
    assert table[1].split()[-3:] == ["60", "2", "12.3ms"]
    assert table[2].split()[-1] == "4.5us"
    assert "execution ledger's samples" in executions_note(items)
    mixed = [items[0], replace(items[1], executions_source="capture")]
    assert "or the job's latest trace capture" in executions_note(mixed)


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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_no_daemon_is_one_clear_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    from procs import REPO, base_env

    env = base_env(XMON_SOCKET=str(tmp_path / "absent.sock"))
    for args in (["programs"], ["capture", "--duration", "1s"]):
        done = subprocess.run([sys.executable, "-m", "xmon", *args], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=60)  # fmt: skip
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "no xmon daemon is answering on" in done.stderr


def test_the_default_table_fits_120_columns() -> None:
    matmul, add, custom = job().programs
    long = replace(job(), job_name="a-very-long-training-job-name", programs=(
        replace(matmul, name="jit_" + "train_step_with_a_very_long_name" * 2, flops=1.23e15,
                flops_lower_bound=True, executions=60, executions_per_second=123.0,
                device_seconds_per_execution=0.0123, executions_window_seconds=30.0,
                executions_counted_at=1.0, executions_source="ledger"),
        add, custom,
    ))  # fmt: skip
    narrow = render_table(sort_rows(rows([long]), "flops")).splitlines()
    assert max(len(line) for line in narrow) <= 120, "\n".join(narrow)
    assert narrow[0].split()[:3] == ["JOB", "FINGERPRINT", "PROGRAM"]
    assert "…" in narrow[1] and "≥1.23P" in narrow[1]
    wide = render_table(sort_rows(rows([long]), "flops"), wide=True).splitlines()
    assert wide[0].split()[1] == "PID" and long.job_name in wide[1]
