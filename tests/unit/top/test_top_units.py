"""The pure parts of ``xmon top``: device merging, sorting, formatting, history, capture text."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from xmon.cli import top as top_cli
from xmon.model import DeviceMemory, HardwareCounters
from xmon.top import fmt
from xmon.top.help import LEGEND, describe_capture
from xmon.top.history import History
from xmon.top.panels import job_legend
from xmon.top.tables import JOB_COLUMNS
from xmon.top.viewmodel import device_rows, job_memory_limit, sort_by

from support.views import GiB, job, snapshot, tpu_device


def test_job_devices_land_on_their_hardware_rows() -> None:
    train = job("train", 1000, devices=2, in_use=GiB, mfu=0.3, hfu=0.45, busy=0.8,
                lower_bound=True)  # fmt: skip
    snap = snapshot(1, jobs=(train,), devices=(tpu_device(0, (1000,)), tpu_device(1, (1000,))))
    rows = device_rows(snap)
    assert [r.key for r in rows] == ["hw:libtpu:0", "hw:libtpu:1"]
    row = rows[0]
    assert row.job_names == ("train",) and row.pids == (1000,)
    assert row.memory_used_bytes == 4 * GiB  # the driver's number wins over the allocator's
    assert row.memory_limit_bytes == 32 * GiB and row.memory_peak_bytes == 2 * GiB
    assert row.utilization_ratio == 0.5 and row.busy_ratio == 0.8
    assert row.memory_ratio == pytest.approx(0.125) and row.peak_ratio == pytest.approx(1 / 16)


def test_unmatched_job_devices_get_their_own_rows_and_filters_apply() -> None:
    cpu = job("cpu", 7, devices=4, platform="cpu", limit=None, mfu=None)
    other = job("other", 8, devices=1)
    snap = snapshot(1, jobs=(cpu, other), devices=(tpu_device(0, (8,)), tpu_device(1)))
    keys = [r.key for r in device_rows(snap)]
    assert keys == ["hw:libtpu:0", "hw:libtpu:1", "job:7:0", "job:7:1", "job:7:2", "job:7:3"]
    assert [r.key for r in device_rows(snap, pid=8)] == ["hw:libtpu:0"]
    cpu_rows = device_rows(snap, pid=7)
    assert len(cpu_rows) == 4 and all(r.memory_limit_bytes is None for r in cpu_rows)
    assert cpu_rows[0].memory_ratio is None  # no limit: no bar, never a guess
    assert cpu_rows[0].utilization_ratio is None and cpu_rows[0].power_watts is None
    assert cpu_rows[0].busy_ratio is None


def test_hardware_row_falls_back_to_job_memory_and_duty_cycle() -> None:
    bare = dataclasses.replace(tpu_device(0, (1,)), hardware=HardwareCounters(duty_cycle_ratio=0.7))
    snap = snapshot(1, jobs=(job("a", 1, devices=1, in_use=GiB, limit=8 * GiB),), devices=(bare,))
    (row,) = device_rows(snap)
    assert row.utilization_ratio == 0.7
    assert (row.memory_used_bytes, row.memory_limit_bytes) == (GiB, 8 * GiB)


def test_job_memory_limit_is_unknown_if_any_device_lacks_it() -> None:
    j = job(devices=2)
    assert job_memory_limit(j) == 32 * GiB
    devices = (j.devices[0], dataclasses.replace(j.devices[1], memory=DeviceMemory()))
    assert job_memory_limit(dataclasses.replace(j, devices=devices)) is None


def test_sort_keeps_unknown_last_both_ways() -> None:
    values = [3, None, 1, 2]
    assert sort_by(values, lambda v: v) == [1, 2, 3, None]
    assert sort_by(values, lambda v: v, reverse=True) == [3, 2, 1, None]


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "n/a"), (0, "0B"), (1000, "1000B"), (1536, "1.5KiB"), (512 * 2**20, "512MiB"),
     (1.5 * GiB, "1.5GiB"), (80 * GiB, "80GiB"), (1023 * 2**20, "1023MiB")],
)  # fmt: skip
def test_human_bytes(value: float | None, text: str) -> None:
    assert fmt.human_bytes(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "n/a"), (0.0005, "500µs"), (0.0123, "12.3ms"), (1.25, "1.25s"), (185, "3m05s"),
     (7300, "2h01m"), (3 * 86400, "3d")],
)  # fmt: skip
def test_seconds(value: float | None, text: str) -> None:
    assert fmt.seconds(value) == text


def test_formatters_print_na_for_unknown() -> None:
    for formatter in (fmt.percent, fmt.rate, fmt.si, fmt.watts, fmt.celsius):
        assert formatter(None) == "n/a"
    assert fmt.percent(0.256, 1) == "25.6%" and fmt.si(1.2e12, "B") == "1.2TB"


def test_bars_and_sparklines() -> None:
    assert fmt.bar_cells(0.0, 4) == "    "
    assert fmt.bar_cells(1.0, 4) == "████"
    assert fmt.bar_cells(0.5, 4) == "██  "
    assert fmt.bar_cells(0.3, 4) == "█▎  "  # 9.6 eighths: one cell and two eighths
    assert fmt.sparkline([0, 0.5, 1.0, None], 4, top=1.0) == "▁▅█ "
    assert fmt.sparkline([1, 2], 4) == "  ▅█"  # right-aligned, scaled to its max
    assert fmt.sparkline([], 3) == "   "
    bar = fmt.Bar(0.5, "1G/2G", peak=0.75).text(8)
    assert bar.plain == "████·│·· 1G/2G"  # the peak reaches the 6th cell of 8
    assert fmt.Bar(None, "2M").text(4).plain == "···· 2M"


@pytest.mark.parametrize("value", [0, 1000, 1536, 2.13 * 2**20, 14.3e6, 1023 * 2**20, 80 * GiB])
def test_top_and_programs_write_bytes_alike(value: float) -> None:
    """One convention, IEC for memory, in every view (issue: 14.3MB in top, 13.6MiB in programs)."""
    from xmon.cli.programs import binary

    assert fmt.human_bytes(value) == binary(value)
    assert fmt.human_bytes(value).endswith(("B", "KiB", "MiB", "GiB"))


def test_history_is_bounded_and_forgets_gone_series() -> None:
    history = History(size=3)
    with_job = snapshot(1, jobs=(job("a", 1, devices=1),))
    for _ in range(5):
        history.add(with_job)
    steps = history.series["job:1:steps"]
    assert list(steps.points) == [2.0, 2.0, 2.0]
    assert history.latest("job:1:mfu") == 0.4
    assert "job:1:busy" not in history.series  # never sampled: no blank row
    for _ in range(2):
        history.add(snapshot(2))
    assert list(history.series["job:1:steps"].points) == [2.0, None, None]
    history.add(snapshot(3))
    assert "job:1:steps" not in history.series and "host:cpu" in history.series


def test_capture_replies_become_one_line() -> None:
    class Reply:
        log_dir = "/var/lib/xmon/tensorboard"
        message = "2 hosts traced"

    assert describe_capture(5, Reply()) == (
        "trace of pid 5 captured: 2 hosts traced; tensorboard --logdir /var/lib/xmon/tensorboard"
    )
    assert describe_capture(5, None) == "trace of pid 5 requested"


@pytest.mark.parametrize(
    ("refresh", "trace", "tty", "message"),
    [(1.0, 3.0, True, None), (0.0, 3.0, True, "--refresh must be 0.05-60 seconds, got 0"),
     (1.0, 0.0, True, "--trace-seconds must be 0.1-600, got 0"),
     (1.0, 3.0, False, "needs a terminal; `xmon top --once` prints one frame as text, "
                       "`xmon monitor` streams JSON")],
)  # fmt: skip
def test_cli_arguments(refresh: float, trace: float, tty: bool, message: str | None) -> None:
    args = argparse.Namespace(refresh=refresh, trace_seconds=trace, once=False)
    assert top_cli.problem(args, tty) == message
    once = argparse.Namespace(refresh=refresh, trace_seconds=trace, once=True)
    assert top_cli.problem(once, False) == top_cli.problem(args, True)  # --once: no terminal


def test_mfu_undeclared_is_a_dash_and_marks_qualify_numbers() -> None:
    declared = job("a", 1, mfu=0.3, hfu=0.5, busy=0.25)
    undeclared = job("b", 2, mfu=None, hfu=0.5, inferred=True, lower_bound=True)
    unknown_peak = dataclasses.replace(
        job("c", 3, mfu=None), steps=dataclasses.replace(job().steps, model_flops_per_step=6e11)
    )
    cells = {j.job_name: {c.label: c.cell(j) for c in JOB_COLUMNS}
             for j in (declared, undeclared, unknown_peak)}  # fmt: skip
    assert (cells["a"]["MFU"], cells["a"]["HFU"], cells["a"]["BUSY"]) == ("30.0%", "50.0%", "25%")
    assert cells["b"]["MFU"] == fmt.UNDECLARED_TEXT and cells["b"]["HFU"] == "≥50.0%"
    assert cells["c"]["MFU"] == fmt.NA_TEXT  # declared, but no peak: unknown, not undefined
    assert cells["b"]["STEPS"] == "~100" and cells["b"]["STEP"].startswith("~")
    uncounted = dataclasses.replace(undeclared.steps, steps_total=0)  # inferred: a rate only
    assert (
        JOB_COLUMNS[[c.label for c in JOB_COLUMNS].index("STEPS")].cell(
            dataclasses.replace(undeclared, steps=uncounted)
        )
        == "~-"
    )
    assert cells["a"]["STEPS"] == "100" and cells["a"]["BUSY"] != fmt.NA_TEXT
    assert cells["b"]["BUSY"] == fmt.NA_TEXT  # not sampled yet
    legend = job_legend([declared, undeclared])
    assert "~ inferred" in legend and "≥ lower bound" in legend and "MFU — undeclared" in legend
    assert job_legend([declared]) == ""


def test_history_marks_inferred_steps_and_skips_undeclared_mfu() -> None:
    history = History(size=3)
    history.add(snapshot(1, jobs=(job("a", 1, mfu=None, hfu=0.5, inferred=True, busy=0.5),)))
    assert history.series["job:1:steps"].label == "a (1) ~steps/s"
    assert "job:1:mfu" not in history.series
    assert history.latest("job:1:hfu") == 0.5 and history.latest("job:1:busy") == 0.5


def test_help_legend_explains_every_mark_and_fits_the_box() -> None:
    marks = {mark for mark, _ in LEGEND}
    assert {"HFU", "MFU", "BUSY", fmt.INFERRED_MARK, fmt.LOWER_BOUND_MARK} <= marks
    assert all(len(text) <= 62 for _, text in LEGEND)  # 72-column box, border and mark column


def test_compiles_view_lists_youngest_first_and_says_ascending_age() -> None:
    from xmon.model import CompileEvent
    from xmon.top.panels import table_label
    from xmon.top.tables import COMPILE_COLUMNS, CompileItem, compiles_table

    j = job("a", 1)
    items = [CompileItem(j, CompileEvent(f"f{t}", 0.1, float(t)), t) for t in (100, 300, 200)]
    table = compiles_table()
    age = next(c for c in COMPILE_COLUMNS if c.label == "AGE")
    ordered = sort_by(items, age.sort, table.reverse)
    assert [i.event.fun_name for i in ordered] == ["f300", "f200", "f100"]  # youngest first
    assert "sorted by AGE ascending" in table_label("compiles", "AGE", table.reverse, "", 120)
    oldest_first = sort_by(items, age.sort, True)
    assert [i.event.fun_name for i in oldest_first] == ["f100", "f200", "f300"]


def test_a_process_of_a_multi_process_job_says_which_in_the_job_column() -> None:
    from xmon.model import FleetIdentity

    name = next(c for c in JOB_COLUMNS if c.label == "JOB")
    alone = job()
    fleet = dataclasses.replace(alone, fleet=FleetIdentity("10.0.0.2:8476/4", 2, 4))
    single = dataclasses.replace(alone, fleet=FleetIdentity("host/train/1"))
    assert name.cell(fleet) == f"{alone.job_name} [2/4]"
    assert name.cell(single) == name.cell(alone) == alone.job_name


def test_a_program_whose_peak_is_below_its_temp_shows_what_it_can_hold() -> None:
    """XLA's peak can leave the temp allocation out (a CPU gradient: peak 3 MiB = args + out,
    temp 6 MiB): the memory view says what the program can hold at once instead."""
    from xmon.model import Program
    from xmon.top.memory import PEAK_BELOW_TEMP_MARK, _program_label, holds_at_most

    MiB = GiB // 1024  # noqa: N806

    grad = Program("g", "jit_grad", argument_bytes=2 * MiB, output_bytes=MiB, temp_bytes=6 * MiB,
                   peak_memory_bytes=3 * MiB)  # fmt: skip
    assert holds_at_most(grad) == 9 * MiB
    assert f"{PEAK_BELOW_TEMP_MARK} holds up to 9MiB" in _program_label(grad).plain
    usual = Program("f", "jit_f", argument_bytes=MiB, output_bytes=MiB, temp_bytes=MiB,
                    peak_memory_bytes=3 * MiB)  # fmt: skip
    assert holds_at_most(usual) is None and PEAK_BELOW_TEMP_MARK not in _program_label(usual).plain
    assert holds_at_most(Program("h", "jit_h", temp_bytes=MiB, peak_memory_bytes=0)) is None


def test_flops_bounds_are_marked_apart() -> None:
    assert fmt.bounded("1.2G", lower=True, upper=False) == "≥1.2G"
    assert fmt.bounded("1.2G", lower=False, upper=True) == "≤1.2G"
    assert fmt.bounded("1.2G", lower=True, upper=True) == "≶1.2G"  # neither bound holds
    assert fmt.bounded("1.2G", lower=False, upper=False) == "1.2G"
    assert fmt.bounded(fmt.NA_TEXT, lower=True, upper=True) == fmt.NA_TEXT
    assert {fmt.UPPER_BOUND_MARK, fmt.EITHER_BOUND_MARK} <= {mark for mark, _ in LEGEND}
