"""``xmon doctor``: the findings of the attached jobs, each with its evidence and its fix.

Exit status: 0 when no finding is at warning or worse, 1 when one is, 2 when the daemon cannot
be asked or the options name no attached job (one line on stderr), so scripts and health
checks can run ``xmon doctor --job train || page``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from xmon.catalogue import select_jobs
from xmon.cli import flags
from xmon.cli.safe_text import printable
from xmon.findings.tracker import severity_rank
from xmon.model import Finding, Job

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2
WARNING = severity_rank("warning")
STACK_LINES = 40  # of the stall's thread stacks, in the text view


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_job(parser, "only the job with this name")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--all", action="store_true", help="show info findings too (setup notes: no peak, ...)"
    )
    flags.add_socket(parser)


def main(args: argparse.Namespace) -> int:
    from xmon.client import DaemonClient, DaemonUnavailable, RequestFailed

    try:
        with DaemonClient(Path(args.socket) if args.socket else None) as client:
            snapshot = client.get_snapshot()
        jobs = select_jobs(snapshot, args.job, None)
    except (DaemonUnavailable, RequestFailed, LookupError) as exc:
        print(printable(f"xmon doctor: {exc}"), file=sys.stderr)
        return EXIT_UNUSABLE
    if args.json:
        print(json.dumps([_job_json(job) for job in jobs], indent=1))
    else:
        print(printable(render(jobs, show_info=args.all, now=time.time()), keep="\n"))
    return exit_status(jobs)


def exit_status(jobs: list[Job]) -> int:
    serious = any(severity_rank(f.severity) >= WARNING for job in jobs for f in job.findings)
    return EXIT_FINDINGS if serious else EXIT_OK


def _job_json(job: Job) -> dict[str, object]:
    return {
        "job_name": job.job_name,
        "pid": job.pid,
        "findings": [dataclasses.asdict(f) for f in job.findings],
    }


def render(jobs: list[Job], show_info: bool = False, now: float = 0.0) -> str:
    if not jobs:
        return "no job is attached to the daemon"
    return "\n\n".join(_render_job(job, show_info, now) for job in jobs)


def _render_job(job: Job, show_info: bool, now: float) -> str:
    shown = [f for f in job.findings if show_info or severity_rank(f.severity) >= WARNING]
    hidden = len(job.findings) - len(shown)
    head = f"{job.job_name} (pid {job.pid})"
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
    lines = ["", f"  {finding.severity.upper()} {finding.kind}: {finding.summary}{age}"]
    width = max((len(name) for name, _ in finding.evidence), default=0)
    lines.extend(f"    {name.ljust(width)}  {value}" for name, value in finding.evidence)
    if finding.fix:
        lines.append(f"    fix: {finding.fix}")
    if finding.detail:
        detail = finding.detail.splitlines()
        lines.append("    " + "\n    ".join(detail[:STACK_LINES]))
        if len(detail) > STACK_LINES:
            lines.append(f"    ... {len(detail) - STACK_LINES} more lines (--json has them all)")
    return lines
