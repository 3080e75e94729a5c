"""``xmon fleet``: every process of the multi-process JAX jobs that a Prometheus scrapes, with
the straggler, a hang's first stopped process and any missing process marked.

Each host's daemon sees only its own processes; the fleet view reads all hosts' series from
Prometheus's HTTP API and judges them with xmon.fleet.judge, the same rules the shipped
alerts use. Exit status: 0 when no shown job has a straggler, hang or missing process, 1 when
one has, 2 when Prometheus cannot be asked or no job matches (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from xmon.fleet.judge import FleetVerdict, group_by_job, judge
from xmon.fleet.prometheus_source import PrometheusSource, PrometheusUnavailable
from xmon.fleet.render import as_json, render_text, trouble
from xmon.views.safe_text import printable

EXIT_OK, EXIT_TROUBLE, EXIT_UNUSABLE = 0, 1, 2
DEFAULT_URL = "http://localhost:9090"
CLEAR = "\x1b[H\x1b[2J"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        default=os.environ.get("XMON_PROMETHEUS_URL", DEFAULT_URL),
        help=f"the Prometheus that scrapes the hosts' daemons "
        f"(default: $XMON_PROMETHEUS_URL, else {DEFAULT_URL})",
    )
    parser.add_argument("--job", metavar="KEY", help="only jobs whose key or name contains KEY")
    parser.add_argument(
        "--selector",
        metavar="MATCHERS",
        default="",
        help='label matchers added to every query, e.g. \'job="xmon",cluster="a"\'',
    )
    parser.add_argument("--all", action="store_true", help="show jobs of a single process too")
    parser.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    parser.add_argument(
        "--watch",
        metavar="SECONDS",
        type=float,
        help="redraw every SECONDS until Ctrl-C (text only)",
    )


def main(args: argparse.Namespace) -> int:
    if args.watch is not None and (args.watch < 0.5 or args.json):
        why = "--watch takes no --json" if args.json else "--watch needs at least 0.5 seconds"
        print(f"xmon fleet: {why}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        source = PrometheusSource(args.prometheus)
        if args.watch is None:
            return _once(source, args)
        return _watch(source, args)
    except PrometheusUnavailable as exc:
        print(printable(f"xmon fleet: {exc}"), file=sys.stderr)
        return EXIT_UNUSABLE


def verdicts(
    source: PrometheusSource,
    args: argparse.Namespace,
    before: Sequence[FleetVerdict] = (),
) -> list[FleetVerdict]:
    """Each job's verdict; ``before`` (a watch's last verdicts) keeps a straggler named while it
    lags past the lower thresholds (xmon.fleet.judge)."""
    named = {v.job_key: v.straggler.process_index for v in before if v.straggler}
    jobs = group_by_job(source.readings(args.selector))
    found = [judge(key, readings, named.get(key)) for key, readings in sorted(jobs.items())]
    if not args.all:
        found = [v for v in found if v.process_count > 1]
    if args.job:
        found = [v for v in found if args.job in v.job_key
                 or any(args.job in p.job_name for p in v.processes)]  # fmt: skip
    return found


def _once(source: PrometheusSource, args: argparse.Namespace) -> int:
    found = verdicts(source, args)
    if args.job and not found:
        print(printable(f"xmon fleet: no job matching {args.job!r} at {source.url}"),
              file=sys.stderr)  # fmt: skip
        return EXIT_UNUSABLE
    if args.json:
        print(json.dumps(as_json(found), indent=1))
    else:
        print(printable(render_text(found), keep="\n"))
    return EXIT_TROUBLE if any(trouble(v) for v in found) else EXIT_OK


def _watch(source: PrometheusSource, args: argparse.Namespace) -> int:
    found: list[FleetVerdict] = []
    try:
        while True:
            found = verdicts(source, args, found)
            text = render_text(found)
            stamp = time.strftime("%H:%M:%S")
            sys.stdout.write(CLEAR + f"xmon fleet  {source.url}  {stamp}\n\n")
            sys.stdout.write(printable(text, keep="\n") + "\n")
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return EXIT_OK
