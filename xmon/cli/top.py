"""``xmon top``: the interactive full-screen view (textual), fed by the daemon's snapshot stream.

textual is imported only when the command runs, so other subcommands do not pay for it; jax is
never imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xmon.cli import flags

PROG = "xmon top"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags.add_socket(parser)
    parser.add_argument(
        "--refresh",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="redraw at most this often (default %(default)s s)",
    )
    parser.add_argument(
        "--job",
        metavar="NAME|PID",
        help="start on this job's tab (its pid, or a part of its name)",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="print one frame as plain text and exit (no terminal needed)",
    )
    parser.add_argument(
        "--trace-seconds",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="length of the profiler trace the t key captures (default %(default)s s)",
    )


def problem(args: argparse.Namespace, is_terminal: bool) -> str | None:
    """Why ``xmon top`` cannot start with these arguments, or None."""
    if not 0.05 <= args.refresh <= 60:
        return f"--refresh must be 0.05-60 seconds, got {args.refresh:g}"
    if not 0.1 <= args.trace_seconds <= 600:
        return f"--trace-seconds must be 0.1-600, got {args.trace_seconds:g}"
    if not is_terminal and not getattr(args, "once", False):
        return (
            "needs a terminal; `xmon top --once` prints one frame as text, "
            "`xmon monitor` streams JSON"
        )
    return None


def main(args: argparse.Namespace) -> int:
    message = problem(args, sys.stdout.isatty() and sys.stdin.isatty())
    if message is not None:
        print(f"{PROG}: {message}", file=sys.stderr)
        return 2
    socket_path = Path(args.socket) if args.socket else None
    if args.once:
        return _once(socket_path, args.job)
    from xmon.top.app import run_top

    return run_top(socket_path, args.refresh, args.trace_seconds, args.job)


def _once(socket_path: Path | None, job: str | None) -> int:
    import shutil

    from xmon.top.once import matching_jobs, render_once
    from xmon.views.safe_text import printable
    from xmon.wire.client import DaemonClient, DaemonUnavailable, RequestFailed

    try:
        with DaemonClient(socket_path) as client:
            snapshot = client.get_snapshot()
    except (DaemonUnavailable, RequestFailed) as exc:
        print(printable(f"{PROG}: {exc}"), file=sys.stderr)
        return 2
    jobs = matching_jobs(snapshot, job)
    if job and not jobs:
        print(printable(f"{PROG}: no attached job is {job!r} (by pid or name)"), file=sys.stderr)
        return 2
    width = shutil.get_terminal_size((160, 24)).columns if sys.stdout.isatty() else 160
    sys.stdout.write(printable(render_once(snapshot, jobs, width), keep="\n"))
    return 0
