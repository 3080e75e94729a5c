"""``xmon programs``: the catalogue of compiled XLA programs of the attached jobs, and
``xmon programs --hlo FINGERPRINT`` for one program's optimized HLO text."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from xmon.analysis import units
from xmon.cli import flags
from xmon.views.catalogue import SORT_KEYS, ProgramRow, rows, select_jobs, sort_rows
from xmon.views.safe_text import printable

COLUMNS = ("JOB", "PID", "FINGERPRINT", "PROGRAM", "FLOPS", "XLA_FLOPS", "LOOPS", "BYTES",
           "FLOP/B", "RIDGE", "BOUND", "ARGS", "OUT", "TEMP", "CODE", "COMPILE", "EXEC", "EXEC/S",
           "DEV/EXEC")  # fmt: skip
# The default table fits 120 columns; --wide shows every column.
NARROW = ("JOB", "FINGERPRINT", "PROGRAM", "FLOPS", "BYTES", "FLOP/B", "BOUND", "TEMP", "EXEC/S",
          "DEV/EXEC")  # fmt: skip
CUT = {"JOB": 12, "PROGRAM": 24}  # longer names end in "…" in the narrow table
LOWER_BOUND = units.LOWER_BOUND_MARK  # FLOPs of a program with a loop of unknown trip count
UPPER_BOUND = units.UPPER_BOUND_MARK  # FLOPs counting a conditional's costliest branch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--job", metavar="NAME", help="only the job with this name")
    which.add_argument("--pid", type=int, help="only the job with this process id")
    parser.add_argument(
        "--sort", choices=SORT_KEYS, default="flops",
        help="largest first: FLOPs, bytes accessed, compile time, or executions per second "
        "(execution ledger or latest trace capture; default flops)",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, default=0, help="show at most N programs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--wide", action="store_true",
        help="every column (pid, XLA's FLOPs, loops, ridge point, argument/output/code bytes, "
        "compile time, executions); the default table fits 120 columns",
    )  # fmt: skip
    parser.add_argument(
        "--hlo", metavar="FINGERPRINT",
        help="print the optimized HLO text of the program (a unique prefix is enough)",
    )  # fmt: skip
    flags.add_socket(parser)


def main(args: argparse.Namespace) -> int:
    from xmon.wire.client import DaemonClient, DaemonUnavailable, RequestFailed

    if args.limit < 0:
        return _fail("--limit must be 0 (all) or more")
    try:
        with DaemonClient(Path(args.socket) if args.socket else None) as client:
            if args.hlo is not None:
                hlo = client.get_hlo(args.hlo, job_name=args.job, job_pid=args.pid)
                text = printable(hlo.text, keep="\n\t")  # the job's text: no escapes reach the tty
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
                return 0
            snapshot = client.get_snapshot()
    except (DaemonUnavailable, RequestFailed) as exc:
        return _fail(str(exc))
    try:
        jobs = select_jobs(snapshot, args.job, args.pid)
    except LookupError as exc:
        return _fail(str(exc))
    selected = sort_rows(rows(jobs), args.sort)
    if args.limit:
        selected = selected[: args.limit]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in selected], indent=1))
    elif not selected:
        print("no compiled programs yet" if jobs else "no job is attached to the daemon")
    else:
        print(printable(render_table(selected, wide=args.wide), keep="\n"))
        print(flops_note(selected))
        print(executions_note(selected))
    return 0


def flops_note(items: list[ProgramRow]) -> str:
    """Says what FLOPS counts, and what the lower-bound mark means where it shows."""
    note = "FLOPS: per device and execution, every loop body once per trip; XLA_FLOPS: XLA's own"
    if any(r.flops_lower_bound for r in items):
        note += f"; {LOWER_BOUND}: a loop of unknown trip count (n? in LOOPS), a lower bound"
    if any(r.flops_upper_bound for r in items):
        note += f"; {UPPER_BOUND}: a conditional's costliest branch counted, an upper bound"
    if any(r.flops_branch_mix for r in items):
        note += "; conditionals' branches counted as often as the samples saw them run"
    return note


def executions_note(items: list[ProgramRow]) -> str:
    """Says where EXEC comes from, or how to get it."""
    sources = {r.executions_source for r in items if r.executions_window_seconds is not None}
    if not sources:
        return "EXEC: run `xmon capture` to count executions in a trace"
    if sources == {"ledger"}:
        return ("EXEC: executions in the execution ledger's samples (EXEC/S over their span; "
                "DEV/EXEC: device time of one execution)")  # fmt: skip
    if "ledger" in sources:
        return ("EXEC: executions in the execution ledger's samples or the job's latest trace "
                "capture (--json: executions_source)")  # fmt: skip
    return "EXEC: executions in the job's latest trace capture (EXEC/S over its length)"


def _fail(message: str) -> int:
    print(printable(f"xmon programs: {message}"), file=sys.stderr)
    return 1


def si(value: float | None) -> str:
    return "-" if value is None else units.si(value)


def binary(value: float | None) -> str:
    return "-" if value is None else units.iec_bytes(value)


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value * 1e9:.3g}ns"


def loops(r: ProgramRow) -> str:
    """While loops, and how many of them have a trip count XLA does not know ("3(1?)")."""
    unknown = f"({r.loops_unknown_trip_count}?)" if r.loops_unknown_trip_count else ""
    return f"{r.loops}{unknown}"


def _cells(r: ProgramRow) -> tuple[str, ...]:
    flops = si(r.flops)
    if r.flops is not None:
        flops = units.bound_mark(r.flops_lower_bound, r.flops_upper_bound) + flops
    return (
        r.job_name, str(r.pid), r.fingerprint[:12], r.name, flops, si(r.flops_xla), loops(r),
        binary(r.bytes_accessed), si(r.arithmetic_intensity), si(r.ridge_point), r.bound or "-",
        binary(r.argument_bytes), binary(r.output_bytes), binary(r.temp_bytes),
        binary(r.generated_code_bytes),
        "-" if r.compile_seconds is None else f"{r.compile_seconds:.3f}s",
        "-" if r.executions is None else str(r.executions), si(r.executions_per_second),
        seconds(r.device_seconds_per_execution),
    )  # fmt: skip


def _pick(cells: tuple[str, ...], names: tuple[str, ...], cut: bool) -> tuple[str, ...]:
    """The cells of the columns ``names``; with ``cut``, long names shortened with "…"."""
    picked = []
    for name in names:
        cell = cells[COLUMNS.index(name)]
        limit = CUT.get(name) if cut else None
        picked.append(cell[: limit - 1] + "…" if limit and len(cell) > limit else cell)
    return tuple(picked)


def render_table(items: list[ProgramRow], wide: bool = False) -> str:
    names = COLUMNS if wide else NARROW
    table = [names, *(_pick(_cells(r), names, cut=not wide) for r in items)]
    widths = [max(len(row[i]) for row in table) for i in range(len(names))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in table]  # fmt: skip
    return "\n".join(lines)
