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
    if not is_terminal:
        return "needs a terminal; for machine-readable output use `xmon monitor`"
    return None


def main(args: argparse.Namespace) -> int:
    message = problem(args, sys.stdout.isatty() and sys.stdin.isatty())
    if message is not None:
        print(f"{PROG}: {message}", file=sys.stderr)
        return 2
    from xmon.top.app import run_top

    return run_top(Path(args.socket) if args.socket else None, args.refresh, args.trace_seconds)
