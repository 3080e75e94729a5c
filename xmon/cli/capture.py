"""``xmon capture``: record a trace (or a device memory profile) inside a running JAX job.

The daemon asks the job's agent, which runs ``jax.profiler`` in the job and writes the trace
into the job's TensorBoard run: ``<logdir>/<job>-<pid>/plugins/profile/<timestamp>/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from xmon.cli import flags
from xmon.views.capture import progress_line
from xmon.views.safe_text import command, printable
from xmon.views.safe_text import lines as safe_lines

if TYPE_CHECKING:
    from xmon.wire.client import CaptureResult

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``3s``, ``500ms``, ``1.5``, ``2m`` -> seconds; ValueError for anything else."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"expected a duration like 3s, 500ms or 1m, got {text!r}")
    seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"must be longer than 0, got {text!r}")
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--job", metavar="NAME", help="the job with this name")
    which.add_argument("--pid", type=int, help="the job with this process id")
    parser.add_argument(
        "--duration", default="3s", metavar="TIME",
        help="how long to trace, e.g. 3s, 500ms, 1m (default 3s)",
    )  # fmt: skip
    parser.add_argument(
        "--logdir", metavar="DIR",
        help="TensorBoard logdir to write into (default: the daemon's); the job writes the "
        "files, so it must be able to write there",
    )  # fmt: skip
    parser.add_argument(
        "--memory", action="store_true",
        help="save a device memory profile (pprof) instead of a trace",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    flags.add_socket(parser)


def main(args: argparse.Namespace) -> int:
    from xmon.wire.client import DaemonClient, DaemonUnavailable, RequestFailed

    try:
        duration = parse_duration(args.duration)
    except ValueError as exc:
        print(f"xmon capture: --duration: {exc}", file=sys.stderr)
        return 2
    try:
        with (
            DaemonClient(Path(args.socket) if args.socket else None) as client,
            progress(sys.stderr, 0.0 if args.memory else duration),
        ):
            result = client.capture(
                job_name=args.job, job_pid=args.pid, duration_s=duration,
                log_dir=args.logdir, memory=args.memory,
            )  # fmt: skip
    except (DaemonUnavailable, RequestFailed) as exc:
        print(printable(f"xmon capture: {exc}"), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_as_json(result), indent=1))
    else:
        print(describe(result))
    return 0


@contextmanager
def progress(out: TextIO, duration: float, every: float = 0.5) -> Iterator[None]:
    """Show the capture's progress on ``out`` while the request waits: one line, rewritten in
    place on a terminal and cleared at the end. Elsewhere (a log, a pipe) nothing: the result
    or the error stays the one line a script reads."""
    start, done = time.monotonic(), threading.Event()
    if not out.isatty():
        yield
        return

    def show() -> None:
        while not done.wait(every):
            line = progress_line(time.monotonic() - start, duration)
            out.write("\r\x1b[K" + line)
            out.flush()

    thread = threading.Thread(target=show, name="xmon-capture-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        out.write("\r\x1b[K")
        out.flush()


def open_commands(kind: str, log_dir: str, paths: tuple[str, ...]) -> list[str]:
    """The exact commands that open a capture."""
    if kind == "memory":
        return [command("pprof", "-http=localhost:8080", p) for p in paths[:1]] + [
            command("go", "tool", "pprof", "-http=localhost:8080", p) for p in paths[:1]
        ]
    return [
        command("xprof", "server", "--logdir", log_dir, "--port", "8791"),
        command("tensorboard", "--logdir", log_dir),
    ]


def took(seconds: float) -> str:
    """``850 ms`` below a second (where ``0.0 s`` said nothing), else ``10.8 s``."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def describe(r: CaptureResult) -> str:
    job = f"job {r.job_name!r} (pid {r.pid})"
    if r.kind == "trace":  # the agent says what it recorded; the request may have waited too
        first = f"traced {job}: {r.message}; {took(r.seconds)} from request to files"
    else:
        first = f"saved the device memory profile of {job} in {took(r.seconds)}"
    lines = [first]
    lines += [f"  {p}" for p in r.paths]
    lines.append("open it with one of:")
    lines += [f"  {c}" for c in open_commands(r.kind, r.log_dir, r.paths)]
    if r.kind == "trace":
        old = command("xprof", "--logdir", r.log_dir, "--port", "8791")
        lines.append(f"  (xprof < 2.24: {old})")
    return safe_lines(lines)  # paths and messages come from the job


def _as_json(result: CaptureResult) -> dict[str, object]:
    data = dataclasses.asdict(result)
    data["open_with"] = open_commands(result.kind, result.log_dir, result.paths)
    return data
