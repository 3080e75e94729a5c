"""The program catalogue: rows from snapshots, then `xmon programs` and `--hlo` against a real
daemon and a real JAX job."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xmon.analysis.peaks import PeakTable
from xmon.cli.programs import executions_note, flops_note, render_table
from xmon.model import (
    DaemonStats,
    Snapshot,
)
from xmon.views.catalogue import rows, select_jobs, sort_rows

from support.program_jobs import job


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
