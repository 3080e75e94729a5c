"""Rich renderables for the fixed parts of ``xmon top``: title bar, device panel, job tabs,
compile summary and history sparklines. Pure functions of model values and view state."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from xmon import __version__
from xmon.model import Job, Snapshot
from xmon.top import fmt
from xmon.top.feed import FeedStatus
from xmon.top.findings import findings_legend, job_mark
from xmon.top.history import History
from xmon.top.viewmodel import DeviceRow, mfu_declared

NO_DEVICES = (
    "No devices: no hardware collector found accelerators on this host and no job with the "
    "xmon agent is attached. Attach one with `xmon run -- python train.py` or xmon.attach()."
)


def title_bar(
    snapshot: Snapshot | None,
    status: FeedStatus,
    paused: bool,
    device_count: int,
    capture: str | None = None,
    findings: str | None = None,
) -> RenderableType:
    """neuron-top's title bar plus nvitop's host summary: two lines. ``capture`` is what a
    capture in progress is doing (t key), shown until it is answered; ``findings`` says the
    host has findings at warning or worse."""
    first = Text(no_wrap=True, overflow="ellipsis")
    first.append(f" xmon {__version__} ", "bold reverse")
    if paused:
        first.append(" PAUSED (z resumes) ", "bold black on yellow")
    if capture:
        first.append(f" {capture} ", "bold black on cyan")
    if findings:
        first.append(f" {findings} ", "bold black on yellow")
    if not status.connected:  # the state matters more than the rest of the line
        first.append(f" ● {status.message} ", "bold red")
    if snapshot is not None:
        first.append(f" host {snapshot.hostname} │ daemon {snapshot.daemon.version} │ ")
        first.append(f"{_count(device_count, 'device')} │ {_count(len(snapshot.jobs), 'job')} │ ")
        first.append(time.strftime("%H:%M:%S", time.localtime(snapshot.wall_time)))
    if status.connected:
        first.append(f"  ● {status.message}", "green")
    return Group(first, _host_line(snapshot))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _host_line(snapshot: Snapshot | None) -> RenderableType:
    host = snapshot.host if snapshot is not None else None
    if host is None:
        return Text(" host: no sample yet", style="dim")
    cpu = host.cpu_utilization_ratio
    memory = host.memory_used_bytes / host.memory_total_bytes if host.memory_total_bytes else None
    load = f" load {host.load_average_1m:.2f}" if host.load_average_1m is not None else ""
    used = f"{fmt.human_bytes(host.memory_used_bytes)}/{fmt.human_bytes(host.memory_total_bytes)}"
    grid = Table.grid(expand=True, padding=(0, 1))
    for ratio in (None, 1, None, 1):
        grid.add_column(ratio=ratio, no_wrap=True)
    grid.add_row(
        Text(" vCPU", style="bold"),
        fmt.Bar(cpu, f"{fmt.percent(cpu)} of {host.cpu_count}{load}", style=fmt.bar_style(cpu)),
        Text("MEM", style="bold"),
        fmt.Bar(memory, used, style=fmt.bar_style(memory)),
    )
    return grid


def device_panel(rows: Sequence[DeviceRow]) -> RenderableType:
    """One line per device: utilisation bar, memory bar (in use / limit, │ = peak), power,
    temperature, and how busy the job on it keeps the device (HFU and MFU are per job: the
    jobs table)."""
    if not rows:
        return Text(NO_DEVICES, style="dim")
    hardware = any(r.power_watts is not None or r.temperature_celsius is not None for r in rows)
    table = Table(expand=True, box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("DEVICE", no_wrap=True)
    table.add_column("KIND", no_wrap=True, max_width=14, overflow="ellipsis")
    table.add_column("JOB", no_wrap=True, max_width=12, overflow="ellipsis")
    table.add_column("UTIL", ratio=2, no_wrap=True, min_width=10)
    table.add_column("MEMORY (│ peak)", ratio=3, no_wrap=True, min_width=18)
    if hardware:
        table.add_column("POWER", justify="right", no_wrap=True)
        table.add_column("TEMP", justify="right", no_wrap=True)
    table.add_column("BUSY", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*_device_cells(row, hardware))
    return table


def _device_cells(row: DeviceRow, hardware: bool) -> list[RenderableType]:
    util = row.utilization_ratio
    memory = row.memory_ratio
    used = fmt.human_bytes(row.memory_used_bytes)
    label = f"{used}/{fmt.human_bytes(row.memory_limit_bytes)}" if memory is not None else used
    cells: list[RenderableType] = [
        Text(row.label, style="bold"),
        Text(row.device_kind),
        Text(",".join(row.job_names) or "-"),
        fmt.Bar(util, fmt.percent(util), style=fmt.bar_style(util)),
        fmt.Bar(memory, label, peak=row.peak_ratio, style=fmt.bar_style(memory)),
    ]
    if hardware:
        cells += [Text(fmt.watts(row.power_watts)), Text(fmt.celsius(row.temperature_celsius))]
    cells.append(Text(fmt.percent(row.busy_ratio)))
    return cells


def table_label(heading: str, sort_label: str, reverse: bool, legend: str, width: int) -> str:
    """The line above a table: its sort, then the marks it shows (which matter more than the
    keys, listed under ?); the sort is said shortly where the whole line would not fit."""
    order = "descending" if reverse else "ascending"
    label = f"{heading}, sorted by {sort_label} {order}"
    if not legend:
        return f"{label} — s: sort, r: reverse"
    if len(label) + len(legend) + 3 <= width:
        return f"{label} — {legend}"
    return f"{heading} by {sort_label} {'▼' if reverse else '▲'} — {legend}"


def job_legend(jobs: Sequence[Job]) -> str:
    """The marks the jobs table shows right now, explained in a few words (more under ?)."""
    parts = []
    if any(j.steps.inferred for j in jobs):
        parts.append(f"{fmt.INFERRED_MARK} inferred")
    if any(j.utilization.flops_lower_bound for j in jobs):
        parts.append(f"{fmt.LOWER_BOUND_MARK} lower bound")
    if any(j.utilization.flops_upper_bound for j in jobs):
        parts.append(f"{fmt.UPPER_BOUND_MARK} upper bound")
    if any(not mfu_declared(j) for j in jobs):
        parts.append(f"MFU {fmt.UNDECLARED_TEXT} undeclared")
    if legend := findings_legend(jobs):
        parts.insert(0, legend)  # first: it says where to look
    return " · ".join(parts)


def job_tabs(jobs: Sequence[Job], active_pid: int | None) -> Text:
    """neuron-top's bottom tab bar: ``all`` then one tab per job; ``>name<`` is the active one."""
    text = Text(no_wrap=True, overflow="ellipsis")
    tabs: list[tuple[int | None, str]] = [(None, "all")]
    tabs += [(j.pid, f"{j.job_name}:{j.pid}" + _tab_mark(j)) for j in jobs]
    for n, (pid, name) in enumerate(tabs, start=1):
        active = pid == active_pid
        label = f" {n} >{name}< " if active else f" {n} {name} "
        text.append(label, "bold black on green" if active else "reverse")
        text.append(" ")
    text.append(" 1-9/a/d: tab", "dim")
    return text


def _tab_mark(job: Job) -> str:
    mark = job_mark(job)
    return f" {mark}" if mark and mark != "i" else ""  # a tab shows warnings and errors only


def compile_summary(jobs: Sequence[Job]) -> RenderableType:
    if not jobs:
        return Text("No job attached: nothing has compiled.", style="dim")
    table = Table(expand=True, box=None, padding=(0, 1), header_style="bold")
    for name in ("JOB", "COMPILES", "RECOMPILES", "BACKEND", "TRACE", "LOWERING", "CACHE HITS"):
        table.add_column(name, justify="left" if name == "JOB" else "right", no_wrap=True)
    for job in jobs:
        c = job.compile
        cache = f"{c.cache_hits_total}/{c.cache_requests_total}" if c.cache_requests_total else "-"
        table.add_row(
            f"{job.job_name}:{job.pid}", str(c.compiles_total), str(c.recompiles_total),
            fmt.seconds(c.backend_compile_seconds_total), fmt.seconds(c.trace_seconds_total),
            fmt.seconds(c.lowering_seconds_total), cache,
        )  # fmt: skip
    return table


def history_panel(history: History, width: int, wanted: Callable[[str], bool]) -> RenderableType:
    """A sparkline per series (oldest left), with its latest value."""
    chart = max(10, width - 40)
    table = Table(expand=True, box=None, padding=(0, 1), show_header=False)
    table.add_column("series", no_wrap=True, width=24, overflow="ellipsis")
    table.add_column("chart", no_wrap=True, width=chart)
    table.add_column("latest", justify="right", no_wrap=True)
    for key, series in history.series.items():
        if not wanted(key):
            continue
        latest = series.points[-1] if series.points else None
        spark = fmt.sparkline(list(series.points), chart, series.top)
        table.add_row(series.label, Text(spark, style="cyan"), _latest(series.unit, latest))
    if not table.rows:
        return Text("No history yet.", style="dim")
    return table


def _latest(unit: str, value: float | None) -> str:
    if unit == "ratio":
        return fmt.percent(value, 1)
    return fmt.human_bytes(value) if unit == "bytes" else fmt.rate(value)
