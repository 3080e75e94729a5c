"""``xmon monitor``: one JSON report per line on stdout, every period (like neuron-monitor).

Reads the daemon's snapshot stream; the report shape is documented in docs/monitor.md and
docs/monitor.schema.json. Diagnostics go to stderr only, so stdout can be piped as is.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from xmon.cli import flags
from xmon.config.errors import did_you_mean
from xmon.model import Snapshot
from xmon.views.monitor_report import GROUPS, ReportOptions, build_report, job_matches

PROG = "xmon monitor"
RETRY_SECONDS = 1.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
CONFIG_KEYS = ("period", "groups", "jobs")


class MonitorConfigError(ValueError):
    """Bad flag or config file; the message is the whole explanation."""


@dataclass(frozen=True)
class MonitorSettings:
    period: float | None  # None: every snapshot the daemon publishes
    options: ReportOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c",
        "--config",
        dest="config_file",
        type=Path,
        metavar="FILE",
        help="JSON or TOML file with period, groups and jobs (flags win)",
    )
    # The old spelling, kept working for scripts; --config is the one every command takes.
    parser.add_argument("--config-file", dest="config_file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--period",
        help="seconds between reports, e.g. 5 or 5s or 500ms "
        "(rounded to the daemon's period; default: every snapshot)",
    )
    parser.add_argument(
        "--groups", help=f"comma-separated groups to include: {','.join(GROUPS)} (default: all)"
    )
    parser.add_argument(
        "--job",
        action="append",
        default=None,
        metavar="NAME",
        help="only jobs whose name matches this glob, or this pid (repeatable)",
    )
    parser.add_argument("--once", action="store_true", help="print one report and exit")
    flags.add_socket(parser)


def parse_duration(value: object, where: str) -> float:
    """Seconds from a number or a string like ``"5s"``, ``"500ms"``, ``"2m"``."""
    if isinstance(value, bool):
        raise MonitorConfigError(f'{where}: expected a duration such as 5 or "5s", got {value}')
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise MonitorConfigError(
                f'{where}: expected a duration such as 5 or "5s", got {value!r}'
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise MonitorConfigError(f"{where}: must be positive, got {value!r}")
    return seconds


def parse_groups(value: object, where: str) -> frozenset[str]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise MonitorConfigError(f"{where}: expected a list of group names")
    groups = frozenset(i.strip() for i in items if i.strip())
    unknown = sorted(groups - set(GROUPS))
    if unknown:
        raise MonitorConfigError(
            f"{where}: unknown group {unknown[0]!r} (known: {', '.join(GROUPS)})"
        )
    if not groups:
        raise MonitorConfigError(f"{where}: at least one group is needed")
    return groups


def load_config_file(path: Path) -> dict[str, Any]:
    """A neuron-monitor-like config: ``{"period": "5s", "groups": [...], "jobs": [...]}``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise MonitorConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise MonitorConfigError(
            f"{path} is not valid {path.suffix[1:] or 'JSON'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise MonitorConfigError(f"{path}: expected an object at the top level")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise MonitorConfigError(
            f"{path}: unknown key {unknown[0]!r}{did_you_mean(unknown[0], CONFIG_KEYS)} "
            f"(known: {', '.join(CONFIG_KEYS)})"
        )
    return data


def settings_from_args(args: argparse.Namespace) -> MonitorSettings:
    """Flags override the config file, which overrides the defaults."""
    config = load_config_file(args.config_file) if args.config_file else {}
    source = str(args.config_file)
    period = None
    if args.period is not None:
        period = parse_duration(args.period, "--period")
    elif "period" in config:
        period = parse_duration(config["period"], f"{source}: period")
    groups = frozenset(GROUPS)
    if args.groups is not None:
        groups = parse_groups(args.groups, "--groups")
    elif "groups" in config:
        groups = parse_groups(config["groups"], f"{source}: groups")
    jobs = args.job if args.job is not None else config.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(j, str | int) for j in jobs):
        raise MonitorConfigError(f"{source}: jobs must be a list of names or pids")
    return MonitorSettings(period, ReportOptions(groups, tuple(str(j) for j in jobs)))


class PeriodGate:
    """Picks the snapshots that start a new period: the daemon publishes every tick, a report
    is due once ``period`` has passed (less half a tick, so a 5 s period over 1 s ticks is
    every 5th snapshot and not every 6th)."""

    def __init__(self, period: float | None) -> None:
        self.period = period
        self.last: Snapshot | None = None
        self._tick: float | None = None
        self._seen: Snapshot | None = None

    def due(self, snapshot: Snapshot) -> bool:
        if self._seen is not None and snapshot.monotonic > self._seen.monotonic:
            self._tick = snapshot.monotonic - self._seen.monotonic
        self._seen = snapshot
        if self.last is None or self.period is None:
            return True
        elapsed = snapshot.monotonic - self.last.monotonic
        return elapsed + (self._tick or 0.0) / 2 >= self.period


def snapshots(socket_path: Path | None, once: bool, err: TextIO) -> Iterator[Snapshot]:
    """The daemon's snapshots. No daemon at the start raises :class:`DaemonUnavailable`; a
    daemon lost later is waited for (a pipeline keeps running across daemon restarts)."""
    from xmon.wire.client import DaemonClient, DaemonUnavailable

    seen_any = lost = False
    while True:
        reason = "the daemon closed the stream"
        with DaemonClient(socket_path) as client:
            try:
                for snapshot in client.subscribe():
                    if lost:
                        print(f"{PROG}: daemon is back", file=err, flush=True)
                        lost = False
                    seen_any = True
                    yield snapshot
            except DaemonUnavailable as exc:
                if once or not seen_any:
                    raise
                reason = str(exc)
        if not lost:
            print(f"{PROG}: {reason}; retrying every {RETRY_SECONDS:g} s", file=err, flush=True)
        lost = True
        time.sleep(RETRY_SECONDS)


class NoMatchingJob(LookupError):
    """``--once --job X`` where no attached job is X: an error, as in ``xmon programs``."""


def unmatched(snapshot: Snapshot, patterns: tuple[str, ...]) -> str | None:
    """Why ``--job`` selects nothing in this snapshot, or None when it selects a job."""
    if not patterns or any(job_matches(j, patterns) for j in snapshot.jobs):
        return None
    attached = ", ".join(f"{j.job_name} (pid {j.pid})" for j in snapshot.jobs) or "none"
    return f"no attached job matches --job {' '.join(patterns)}; attached: {attached}"


def run(settings: MonitorSettings, once: bool, socket_path: Path | None, out: TextIO) -> None:
    gate = PeriodGate(settings.period)
    warned = False
    for snapshot in snapshots(socket_path, once, sys.stderr):
        if not gate.due(snapshot):
            continue
        problem = unmatched(snapshot, settings.options.jobs)
        if problem and once:
            raise NoMatchingJob(problem)
        if problem and not warned:  # a stream waits for the job: say so once, keep reporting
            print(f"{PROG}: {problem}; reports list no jobs until one does", file=sys.stderr)
        warned = problem is not None
        report = build_report(snapshot, gate.last, settings.options)
        gate.last = snapshot
        out.write(json.dumps(report, separators=(",", ":"), allow_nan=False) + "\n")
        out.flush()
        if once:
            return


def main(args: argparse.Namespace) -> int:
    from xmon.wire.client import DaemonUnavailable

    try:
        settings = settings_from_args(args)
    except MonitorConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        run(settings, args.once, Path(args.socket) if args.socket else None, sys.stdout)
    except (DaemonUnavailable, NoMatchingJob) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return 0
