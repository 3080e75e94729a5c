"""The two-process job the fleet tests run, and what they ask of it: two ``jax.distributed``
processes on CPU with real cross-process collectives, each attached to its own daemon (its own
socket, metrics port and logdir, as on two hosts), one real Prometheus scraping both daemons
with the shipped rules, and ``xmon fleet`` reading that Prometheus. Each test module of
tests/fleet that asks for ``running`` gets one such job of its own (tests/fleet/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fleet_jobs

from support.procs import (
    REPO,
    Daemon,
    Proc,
    Prometheus,
    base_env,
    free_port,
    start_daemon,
    start_job,
    start_prometheus,
    wait_for,
)

PROCESSES = 2
HEALTHY_SECONDS = int(os.environ.get("XMON_FLEET_HEALTHY_SECONDS", "300"))
STRAGGLING_SECONDS = int(os.environ.get("XMON_FLEET_STRAGGLING_SECONDS", "300"))
NAMED_WITHIN = 60.0
SLOW_PROCESS, SLOW_SECONDS = 1, 0.05
BLOCKED_PROCESS = 1
RULES = REPO / "dashboards" / "alerts" / "xmon.rules.yml"
FLEET_ALERTS = 'ALERTS{alertname=~"XmonFleet.*"}'


@dataclass
class Fleet:
    daemons: list[Daemon]
    jobs: list[Proc]
    prometheus: Prometheus
    faults: Path
    notes: list[str] = field(default_factory=list)

    def fault(self, **fault: Any) -> None:
        self.faults.write_text(json.dumps(fault))

    def alive(self) -> None:
        for i, job in enumerate(self.jobs):
            assert job.alive(), f"process {i} exited:\n{job.log()[-3000:]}"

    def fleet_view(self) -> tuple[int, list[dict[str, Any]]]:
        result = subprocess.run(
            [sys.executable, "-m", "xmon", "fleet", "--prometheus", self.prometheus.url,
             "--json"],
            capture_output=True, text=True, timeout=60, env=base_env(), cwd=REPO,
        )  # fmt: skip
        assert result.returncode in (0, 1), result.stderr
        return result.returncode, json.loads(result.stdout)

    def fleet_text(self) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "xmon", "fleet", "--prometheus", self.prometheus.url],
            capture_output=True, text=True, timeout=60, env=base_env(), cwd=REPO,
        )  # fmt: skip
        return result.stdout

    def alerts(self, state: str | None = None) -> list[dict[str, str]]:
        matcher = FLEET_ALERTS if state is None else FLEET_ALERTS[:-1] + f',alertstate="{state}"}}'
        return [s["metric"] for s in self.prometheus.query(matcher)]


def started_fleet(root: Path) -> Iterator[Fleet]:
    """Two daemons, the job's two processes and a Prometheus with the shipped rules, stopped
    after the caller is done."""
    faults = root / "faults.json"
    faults.write_text("{}")
    daemons = [start_daemon(root / f"host{i}") for i in range(PROCESSES)]
    prometheus = start_prometheus(
        root / "prometheus", [f"127.0.0.1:{d.metrics_port}" for d in daemons], [RULES]
    )
    coordinator = f"127.0.0.1:{free_port()}"
    jobs = [
        start_job(
            root / f"host{i}", daemons[i].socket_path, fleet_jobs.TRAIN, "train", devices=1,
            FLEET_PROCESS=str(i), FLEET_COUNT=str(PROCESSES), FLEET_COORDINATOR=coordinator,
            FLEET_FAULTS=str(faults),
            XMON_LEDGER_INTERVAL="5",  # four samples in the first 20 s, then one every 5 s
        )
        for i in range(PROCESSES)
    ]  # fmt: skip
    stack = Fleet(daemons, jobs, prometheus, faults)
    try:
        yield stack
    finally:
        for job in jobs:
            job.stop(timeout=5)
        prometheus.stop()
        for daemon in daemons:
            daemon.stop()


def wait_until_running(fleet: Fleet) -> Fleet:
    """Every process reports its job key, process index and host time per step."""

    def all_judged() -> bool:
        fleet.alive()
        return len(fleet.prometheus.query("xmon:job_process:step_host_seconds")) == PROCESSES

    wait_for(all_judged, 240, "host seconds per step of both processes", interval=2)
    return fleet


def ranked_first(fleet: Fleet) -> dict[str, str] | None:
    top = fleet.prometheus.query("topk(1, xmon:job_process:step_host_excess_ratio)")
    return top[0]["metric"] if top else None


def panel_queries() -> list[tuple[str, str]]:
    sys.path.insert(0, str(REPO))
    from dashboards.board_fleet import BOARD

    row = next(r for r in BOARD.rows if r.title == "Multi-process jobs")
    return [(panel.title, query.expr.replace("$instance", ".*").replace("$job_key", ".*"))
            for panel in row.panels for query in panel.queries]  # fmt: skip


def process(verdict: dict[str, Any], index: int) -> dict[str, Any]:
    return next(p for p in verdict["processes"] if p["process_index"] == index)
