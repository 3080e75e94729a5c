"""``xmon top --once``: one frame of the view as plain text, then exit (as ``top -b -n 1``):
for a script, a log or a terminal too small or too remote for the full screen.

The same panels and columns as the full-screen view: the devices, the jobs table and each
job's findings, for every job or for the one ``--job`` names.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from xmon.model import Job, Snapshot
from xmon.top.panels import device_panel, job_legend
from xmon.top.tables import JOB_COLUMNS
from xmon.top.viewmodel import device_rows

WIDTH = 160  # columns when stdout is not a terminal (a pipe or a file)


def matching_jobs(snapshot: Snapshot, wanted: str | None) -> list[Job]:
    """Every job, or those whose pid is ``wanted`` or whose name contains it."""
    if not wanted:
        return list(snapshot.jobs)
    return [j for j in snapshot.jobs if str(j.pid) == wanted or wanted in j.job_name]


def render_once(snapshot: Snapshot, jobs: Sequence[Job], width: int = WIDTH) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.print(f"xmon top  {snapshot.hostname}  snapshot {snapshot.seq}", markup=False)
    if len(jobs) == len(snapshot.jobs):
        rows = device_rows(snapshot)
    else:  # a job asked for: its devices only
        rows = [r for job in jobs for r in device_rows(snapshot, job.pid)]
    console.print(device_panel(rows))
    console.print()
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for column in JOB_COLUMNS:
        table.add_column(column.label, no_wrap=True)
    for job in jobs:
        table.add_row(*(column.cell(job) for column in JOB_COLUMNS))
    console.print(table if jobs else "no job is attached", markup=False)
    legend = job_legend(list(jobs))
    if legend:
        console.print(legend, markup=False)
    for job in jobs:
        for finding in job.findings:
            line = f"{job.job_name}:{job.pid}  {finding.severity} {finding.kind}: {finding.summary}"
            console.print(line, markup=False, highlight=False)
    return console.export_text()
