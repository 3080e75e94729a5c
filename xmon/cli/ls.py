"""``xmon ls``: the accelerators on this host, like neuron-ls and tpu-info.

Through the daemon (its latest snapshot) when one answers on the socket; else directly: the
hardware collectors run once in this process, with the daemon's configuration (flags, XMON_*
environment, config file). Never imports jax. Exit status: 0 when the listing worked (devices
or none), 1 on a bad setting or a failed collector.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from xmon.cli import flags
from xmon.config import ConfigError, DaemonConfig, add_hardware_arguments, load_config
from xmon.model import CollectorHealth, Device, Job, RuntimeService, Snapshot

from .ls_render import Holder, Row, cpu_device_json, job_coords, render_json, render_table

PROG = "xmon ls"
CONNECT_TIMEOUT = 1.0


@dataclass(frozen=True)
class Listing:
    """What was found, wherever it came from."""

    devices: tuple[Device, ...]
    source: str  # where the listing came from, for the human-readable header
    jobs: tuple[Job, ...] = ()
    services: tuple[RuntimeService, ...] = ()
    health: tuple[CollectorHealth, ...] = ()
    cpu_count: int | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--json", action="store_true", help="print a JSON array, one object per device")
    add("-w", "--wide", action="store_true", help="add PCI address, /dev node, NUMA node, "
        "chip and metrics service; do not shorten commands")  # fmt: skip
    add("--direct", action="store_true", help="read the hardware here even if a daemon runs")
    flags.add_socket(parser)
    add("--config", metavar="FILE", help="daemon TOML config, for direct reads")
    add("--timeout", type=float, default=5.0, metavar="SECONDS",
        help="longest wait for the hardware or the daemon (default 5)")  # fmt: skip
    add_hardware_arguments(parser)


# --- sources ---------------------------------------------------------------------------------


def from_daemon(socket_path: Path, timeout: float) -> Listing | None:
    """A snapshot the daemon collects for this request, or None when no daemon answers there."""
    if not socket_path.exists():
        return None
    from xmon.wire.client import DaemonClient, DaemonUnavailable

    try:
        with DaemonClient(socket_path, connect_timeout=min(timeout, CONNECT_TIMEOUT)) as client:
            snapshot = client.get_snapshot(fresh=True)
    except DaemonUnavailable:
        print(f"{PROG}: no daemon answers on {socket_path}; reading the hardware directly",
              file=sys.stderr)  # fmt: skip
        return None
    return listing_of(snapshot, f"daemon on {socket_path}")


def listing_of(snapshot: Snapshot, source: str) -> Listing:
    return Listing(
        devices=snapshot.devices,
        source=source,
        jobs=snapshot.jobs,
        services=snapshot.runtime_services,
        health=snapshot.collectors,
        cpu_count=snapshot.host.cpu_count if snapshot.host else None,
    )


def direct(config: DaemonConfig, timeout: float) -> Listing:
    """Run the enabled hardware collectors once, here (the host collector is not needed)."""
    from xmon.collectors import CollectContext, CollectorRunner, enabled_collectors

    names = [n for n in enabled_collectors(None, config.collectors) if n != "host"]
    # Collectors size their per-tick RPC budget from the period: give them the whole timeout.
    settings = replace(config, period_seconds=max(0.05, min(timeout, 3600.0)))
    runner = CollectorRunner(names, timeout=timeout, config=settings)
    try:
        output, health = runner.run(CollectContext())
    finally:
        runner.close(wait=0.5)
    return Listing(output.devices, "direct", (), output.runtime_services, health, os.cpu_count())


# --- output ----------------------------------------------------------------------------------


def rows_of(listing: Listing, procfs_root: Path) -> list[Row]:
    from xmon.collectors.tpu_discovery import read_command

    jobs = {job.pid: job for job in listing.jobs}
    rows = []
    for device in listing.devices:
        holders = []
        for pid in device.pids or tuple(p.pid for p in device.processes):
            job = jobs.get(pid)
            command = " ".join(job.argv) if job and job.argv else read_command(procfs_root, pid)
            holders.append(Holder(pid, command, job.job_name if job else None))
        rows.append(Row(device, tuple(holders), job_coords(device, listing.jobs)))
    return rows


def none_found(listing: Listing) -> str:
    """ "no TPU/GPU found; N CPU devices (where N comes from)": the devices ``--json`` lists."""
    cpu_jobs = [job for job in listing.jobs if job.platform == "cpu" and job.devices]
    if cpu_jobs:
        job = cpu_jobs[0]
        where = f"JAX devices of job {job.job_name} (pid {job.pid})"
        return f"no TPU/GPU found; {len(job.devices)} CPU devices ({where})"
    count = listing.cpu_count or os.cpu_count() or 1
    return f"no TPU/GPU found; no JAX job attached ({count} host CPUs)"


def cpu_devices_json(listing: Listing) -> list[dict[str, object]]:
    """The CPU devices ``none_found`` counts, as ``--json`` objects, so the JSON and the text
    agree; host CPUs are not JAX devices until a job makes them so."""
    cpu_jobs = [job for job in listing.jobs if job.platform == "cpu" and job.devices]
    if not cpu_jobs:
        return []
    job = cpu_jobs[0]
    holder = {"pid": job.pid, "command": " ".join(job.argv) or None, "job_name": job.job_name}
    return [cpu_device_json(device, holder) for device in job.devices]


def problems(listing: Listing) -> tuple[list[str], list[str]]:
    """(errors, notes): failed collectors are errors; runtimes not answering are notes."""
    errors = [f"collector {h.name} failed: {h.last_error or 'no answer'}"
              for h in listing.health if not h.up and h.name != "host"]  # fmt: skip
    notes = [
        f"{s.source} runtime metrics at {s.address} not answering ({s.error}); numbers come "
        "from a job started with the metrics server on (libtpu: TPU_RUNTIME_METRICS_PORTS)"
        for s in listing.services
        if not s.up
    ]
    return errors, notes


def _print(listing: Listing, args: argparse.Namespace, procfs_root: Path) -> None:
    rows = rows_of(listing, procfs_root)
    if args.json:
        print(render_json(rows) if rows else json.dumps(cpu_devices_json(listing), indent=2))
        if not rows:
            print(none_found(listing), file=sys.stderr)
    elif rows:
        print(f"{len(rows)} device(s), from {listing.source}")
        print(render_table(rows, wide=args.wide))
    else:
        print(none_found(listing))


def main(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= 600:
        print(f"{PROG}: --timeout must be 0-600 seconds, got {args.timeout:g}", file=sys.stderr)
        return 1
    try:
        config = load_config(args, os.environ)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    listing = None if args.direct else from_daemon(config.socket_path, args.timeout)
    if listing is None:
        listing = direct(config, args.timeout)
    _print(listing, args, config.procfs_root)
    errors, notes = problems(listing)
    for line in [*notes, *errors]:
        print(f"{PROG}: {line}", file=sys.stderr)
    return 1 if errors else 0
