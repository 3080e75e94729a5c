"""What a view pays to read a snapshot of many programs: a whole frame (the catalogue sent), and
the frames that follow it when the view asks for changes (the catalogue named, not sent).

The daemon's encoder makes both from fully populated jobs (tests' ``train_job``), and the
client's ``SnapshotReader`` reads them, gunzip and JSON included, as ``xmon top`` does every
period. Budget: a 4,096-program snapshot decodes in under 100 ms.

    python benchmarks/view_decode.py [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable

from xmon.model import Job
from xmon.wire.client import MAX_SNAPSHOT_BYTES, SnapshotReader, gunzip
from xmon.wire.snapshot_encoding import SnapshotEncoder

from common import machine, summary, table, today, write_section
from support.sample_snapshots import snapshot, train_job

BUDGET_SECONDS = 0.100


def _timed(read: Callable[[], object], repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return summary(times)


def measure(jobs: int, programs: int, repeats: int) -> list[object]:
    job = train_job(n_programs=programs // jobs)
    catalogue: tuple[Job, ...] = tuple(dataclasses.replace(job, pid=i) for i in range(jobs))
    encoder = SnapshotEncoder()
    whole = encoder.encode(snapshot(catalogue, seq=1))
    later = dataclasses.replace(catalogue[0], last_report_at=job.last_report_at + 1.0)
    encoder.encode(snapshot((later, *catalogue[1:]), seq=2))
    changes = encoder.changes
    assert changes is not None and len(changes.json) < len(whole.json)

    whole_times = _timed(lambda: SnapshotReader().read(whole), repeats)
    text = gunzip(whole.json, MAX_SNAPSHOT_BYTES)
    parse_times = _timed(lambda: json.loads(text), repeats)  # the floor: JSON alone
    readers = [SnapshotReader() for _ in range(repeats)]
    for reader in readers:  # each has read the frame before, untimed
        reader.read(whole)
    primed = iter(readers)
    change_times = _timed(lambda: next(primed).read(changes), repeats)
    return [
        f"{jobs} × {programs // jobs:,}",
        f"{len(whole.json) / 1024:.0f} KiB",
        f"{whole_times['median'] * 1e3:.1f} / {whole_times['p99'] * 1e3:.1f}",
        f"{parse_times['median'] * 1e3:.1f}",
        f"{len(changes.json) / 1024:.1f} KiB",
        f"{change_times['median'] * 1e3:.2f} / {change_times['p99'] * 1e3:.2f}",
        "yes" if whole_times["median"] < BUDGET_SECONDS else "**no**",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 3 if args.quick else 20
    rows = [measure(jobs, 4096, repeats) for jobs in (1, 8)]
    for row in rows:
        print(" | ".join(str(c) for c in row), flush=True)
    header = ["jobs × programs", "whole frame (gzip)", "whole: median / p99 (ms)",
              "of which json.loads alone: median (ms)",
              "changes frame (gzip)", "changes: median / p99 (ms)",
              f"whole median < {BUDGET_SECONDS * 1e3:g} ms"]  # fmt: skip
    body = (
        f"## View decode\n\n{today()} — {machine()}\n\n"
        f"`benchmarks/view_decode.py`: a view reading a snapshot of 4,096 fully populated "
        f"programs, {repeats} times: a whole frame (gunzip, JSON, the model), and a frame of "
        f"changes that follows it (a job's counters changed, its programs named, not sent), "
        f"as `xmon top` reads one each period.\n\n" + table(header, rows)
    )
    write_section("view-decode", body)
    print(body)


if __name__ == "__main__":
    main()
