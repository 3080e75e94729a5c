"""``xmon top``: the interactive full-screen view (textual), fed by the daemon's snapshot stream.

textual is imported only when the command runs, so other subcommands do not pay for it; jax is
never imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "xmon top"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket", type=Path, help="daemon socket (default: $XMON_SOCKET or the standard location)"
    )
    parser.add_argument(
        "--refresh",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="redraw at most this often (default %(default)s s)",
    )


def main(args: argparse.Namespace) -> int:
    if not 0.05 <= args.refresh <= 60:
        print(f"{PROG}: --refresh must be 0.05-60 seconds, got {args.refresh:g}", file=sys.stderr)
        return 2
    if not sys.stdout.isatty():
        print(
            f"{PROG}: needs a terminal; for machine-readable output use `xmon monitor`",
            file=sys.stderr,
        )
        return 2
    from xmon.top.app import run_top

    return run_top(args.socket, args.refresh)
