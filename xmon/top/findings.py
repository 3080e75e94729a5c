"""Findings in ``xmon top``: the mark on a job's row and tab, and the findings view (``f``).

The view lists the host's findings and those of the jobs in scope (the job tab, or all jobs),
worst first, each with its severity, how long it has held, summary, evidence, fix and long
evidence (a stall's thread stacks), as ``xmon doctor --all`` prints them.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from xmon.model import Finding, Job, Snapshot
from xmon.top import fmt
from xmon.views.safe_text import shown

# The mark of a job's worst finding: warning and error stand out, info is a quiet note.
MARKS = {"error": "‼", "warning": "!", "info": "i"}
STYLES = {"error": "bold white on red", "warning": "bold black on yellow", "info": "cyan"}
# xmon.findings.tracker's order, kept here so that top does not import the daemon's side
# (and protobuf with it) before its first frame.
_RANK = {"info": 0, "warning": 1, "error": 2}
WARNING = _RANK["warning"]


def severity_rank(severity: str) -> int:
    return _RANK.get(severity, 0)


DETAIL_LINES = 400  # of a finding's long evidence; a stall's stacks fit with room to spare
FIELD_CHARS = 2000  # of a summary, evidence value or fix: a screenful, not a megabyte
LINE_CHARS = 500  # of a line of the long evidence
NO_FINDINGS = "No findings: xmon sees nothing wrong here (and no setup notes)."


def worst(findings: Sequence[Finding]) -> Finding | None:
    return max(findings, key=lambda f: severity_rank(f.severity), default=None)


def job_mark(job: Job) -> str:
    """The mark of the job's worst finding, "" without any."""
    finding = worst(job.findings)
    return MARKS.get(finding.severity, "") if finding is not None else ""


def mark_rank(job: Job) -> int | None:
    """Sort key of the jobs table's mark column: the worst severity, None without findings."""
    finding = worst(job.findings)
    return severity_rank(finding.severity) if finding is not None else None


def serious(findings: Sequence[Finding]) -> int:
    return sum(1 for f in findings if severity_rank(f.severity) >= WARNING)


def findings_legend(jobs: Sequence[Job]) -> str:
    """A few words above the jobs table when a mark is shown."""
    if not any(j.findings for j in jobs):
        return ""
    shown = {f.severity for j in jobs for f in j.findings}
    marks = "/".join(MARKS[s] for s in ("error", "warning", "info") if s in shown)
    return f"{marks} findings (f)"


def title_note(snapshot: Snapshot) -> str | None:
    """What the title bar says when the host itself has a finding at warning or worse."""
    count = serious(snapshot.findings)
    if not count:
        return None
    return f"! {count} host finding{'s' * (count != 1)} (f)"


def findings_panel(snapshot: Snapshot, jobs: Sequence[Job]) -> RenderableType:
    """The host's findings, then each job's (in scope), each finding in full."""
    parts: list[RenderableType] = []
    now = snapshot.wall_time
    if snapshot.findings:
        parts.append(_heading(f"host {snapshot.hostname}", snapshot.findings))
        parts.extend(_finding(f, now) for f in snapshot.findings)
    for job in jobs:
        parts.append(_heading(f"{job.job_name}:{job.pid}", job.findings))
        parts.extend(_finding(f, now) for f in job.findings)
    if not any(j.findings for j in jobs) and not snapshot.findings:
        parts.append(Text(NO_FINDINGS, style="dim"))
    return Group(*parts)


def _heading(name: str, findings: Sequence[Finding]) -> Text:
    text = Text(shown(name, FIELD_CHARS), style="bold underline")
    count = len(findings)
    text.append(f"  {count} finding{'s' * (count != 1)}" if count else "  no findings")
    return text


def _finding(finding: Finding, now: float) -> RenderableType:
    head = Text()
    head.append(f" {finding.severity.upper()} ", STYLES.get(finding.severity, ""))
    head.append(f" {shown(finding.kind, FIELD_CHARS)}", "bold")
    head.append(f": {shown(finding.summary, FIELD_CHARS)}")
    if finding.since and now >= finding.since:
        head.append(f"  (for {fmt.seconds(now - finding.since)})", "dim")
    parts: list[RenderableType] = [Text(""), head]
    if finding.evidence:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="dim", no_wrap=True)
        table.add_column()
        # Text cells, never strings: rich reads a string as markup, so a job's "[/x]" in a
        # value raised MarkupError and took the whole view down.
        for name, value in finding.evidence:
            table.add_row(Text(f"  {shown(name, FIELD_CHARS)}"), Text(shown(value, FIELD_CHARS)))
        parts.append(table)
    if finding.fix:
        fix = Text("  fix: ", style="bold green")
        fix.append(shown(finding.fix, FIELD_CHARS), style="")
        parts.append(fix)
    if finding.detail:
        lines = finding.detail.splitlines()
        first = "\n".join(shown(line, LINE_CHARS) for line in lines[:DETAIL_LINES])
        parts.append(Text(_indent(first), style="dim", no_wrap=True, overflow="ellipsis"))
        if len(lines) > DETAIL_LINES:
            more = len(lines) - DETAIL_LINES
            parts.append(Text(f"    ... {more} more lines (xmon doctor --json)", style="dim"))
    return Group(*parts)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
