"""``xmon doctor``: the findings of the host and of the attached jobs, each with its evidence
and its fix.

Exit status: 0 when no finding is at warning or worse, 1 when one is, 2 when the daemon cannot
be asked or the options name no attached job (one line on stderr), so scripts and health
checks can run ``xmon doctor --job train || page``. Host findings (runtime metrics out of
reach, NVML missing, a preallocated card) count for every job: they hide its numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from xmon.cli import flags
from xmon.findings.tracker import severity_rank
from xmon.model import Finding, Job, Snapshot
from xmon.views.catalogue import select_jobs
from xmon.views.safe_text import clipped, printable

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2
WARNING = severity_rank("warning")
STACK_LINES = 40  # of the stall's thread stacks, in the text view
FIELD_CHARS = 2000  # of a summary, evidence value or fix in the text view (--json has all)
LINE_CHARS = 500  # of a line of the stacks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_job(parser, "only the job with this name")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--all", action="store_true", help="show info findings too (setup notes: no peak, ...)"
    )
    flags.add_socket(parser)


def main(args: argparse.Namespace) -> int:
    from xmon.wire.client import DaemonClient, DaemonUnavailable, RequestFailed

    try:
        with DaemonClient(Path(args.socket) if args.socket else None) as client:
            snapshot = client.get_snapshot()
        jobs = select_jobs(snapshot, args.job, None)
    except (DaemonUnavailable, RequestFailed, LookupError) as exc:
        print(printable(f"xmon doctor: {exc}"), file=sys.stderr)
        return EXIT_UNUSABLE
    host = snapshot.findings
    if args.json:
        print(json.dumps(as_json(snapshot, jobs), indent=1))
    else:
        text = render(
            jobs, show_info=args.all, now=time.time(), host=host, hostname=snapshot.hostname
        )
        print(printable(text, keep="\n"))
    return exit_status(jobs, host)


def exit_status(jobs: list[Job], host: tuple[Finding, ...] = ()) -> int:
    findings = [*host, *(f for job in jobs for f in job.findings)]
    serious = any(severity_rank(f.severity) >= WARNING for f in findings)
    return EXIT_FINDINGS if serious else EXIT_OK


def as_json(snapshot: Snapshot, jobs: list[Job]) -> dict[str, object]:
    """``--json``: the host's findings and each selected job's, every field of each."""
    return {
        "hostname": snapshot.hostname,
        "host_findings": [dataclasses.asdict(f) for f in snapshot.findings],
        "jobs": [_job_json(job) for job in jobs],
    }


def _job_json(job: Job) -> dict[str, object]:
    return {
        "job_name": job.job_name,
        "pid": job.pid,
        "findings": [dataclasses.asdict(f) for f in job.findings],
    }


def render(
    jobs: list[Job],
    show_info: bool = False,
    now: float = 0.0,
    host: tuple[Finding, ...] = (),
    hostname: str = "this host",
) -> str:
    blocks = [_render_block(f"host {hostname}", host, show_info, now)] if host else []
    if not jobs:
        blocks.append("no job is attached to the daemon")
    blocks += [_render_job(job, show_info, now) for job in jobs]
    return "\n\n".join(blocks)


def _render_job(job: Job, show_info: bool, now: float) -> str:
    return _render_block(f"{job.job_name} (pid {job.pid})", job.findings, show_info, now)


def _render_block(head: str, findings: tuple[Finding, ...], show_info: bool, now: float) -> str:
    shown = [f for f in findings if show_info or severity_rank(f.severity) >= WARNING]
    hidden = len(findings) - len(shown)
    if not shown:
        note = f" ({hidden} info finding{'s' * (hidden != 1)}: --all shows them)" if hidden else ""
        return f"{head}: no problems found{note}"
    lines = [f"{head}: {len(shown)} finding{'s' * (len(shown) != 1)}"]
    for finding in shown:
        lines.extend(_render_finding(finding, now))
    if hidden:
        lines.append(f"  ({hidden} info finding{'s' * (hidden != 1)} not shown: --all)")
    return "\n".join(lines)


def _render_finding(finding: Finding, now: float) -> list[str]:
    age = f", for {now - finding.since:.0f} s" if now and finding.since else ""
    # A finding quotes its job (program names, stacks): each field is cut to what a terminal
    # shows, so a megabyte from one job never floods the operator's screen or a health check.
    head = f"{clipped(finding.kind, FIELD_CHARS)}: {clipped(finding.summary, FIELD_CHARS)}"
    lines = ["", f"  {finding.severity.upper()} {head}{age}"]
    evidence = [(clipped(n, FIELD_CHARS), clipped(v, FIELD_CHARS)) for n, v in finding.evidence]
    width = max((len(name) for name, _ in evidence), default=0)
    lines.extend(f"    {name.ljust(width)}  {value}" for name, value in evidence)
    if finding.fix:
        lines.append(f"    fix: {clipped(finding.fix, FIELD_CHARS)}")
    if finding.detail:
        detail = finding.detail.splitlines()
        lines.append("    " + "\n    ".join(clipped(d, LINE_CHARS) for d in detail[:STACK_LINES]))
        if len(detail) > STACK_LINES:
            lines.append(f"    ... {len(detail) - STACK_LINES} more lines (--json has them all)")
    return lines
