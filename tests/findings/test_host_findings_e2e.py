"""A host finding through a real daemon to every consumer: the tpu collector on a fixture TPU
host whose chips a process holds while no libtpu metrics service answers. ``xmon doctor``
names the port variable and exits 1, /metrics has ``xmon_host_finding``, ``xmon monitor``'s
report carries it, and once a (fake) libtpu service answers the finding goes away."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from xmon.wire.client import DaemonClient

from support.fakes.libtpu_server import Fakes, scenario
from support.fakes.tpu_daemon import settled_scrape, tpu_only_daemon
from support.fakes.tpu_host import FIXTURES
from support.procs import REPO, Daemon, base_env, wait_for

pytestmark = pytest.mark.e2e


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def xmon(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    env = base_env(XMON_SOCKET=str(daemon.socket_path))
    return subprocess.run([sys.executable, "-m", "xmon", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=60)  # fmt: skip


def host_kinds(daemon: Daemon) -> list[str]:
    with DaemonClient(daemon.socket_path) as client:
        return [f.kind for f in client.get_snapshot().findings]


def test_tpus_held_without_a_metrics_service_reach_every_consumer(tmp_path: Path) -> None:
    daemon = tpu_only_daemon(tmp_path, FIXTURES / "v5e-4", [f"localhost:{closed_port()}"])
    try:
        wait_for(lambda: host_kinds(daemon) == ["tpu_metrics_unreachable"], 30, "the finding")
        doctor = xmon(daemon, "doctor")
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        assert re.search(r"^host \S+: 1 finding$", doctor.stdout, re.M), doctor.stdout
        assert "WARNING tpu_metrics_unreachable: TPUs are in use" in doctor.stdout
        assert "TPU_RUNTIME_METRICS_PORTS=8431" in doctor.stdout
        assert "processes holding chips  4242" in doctor.stdout
        assert "no job is attached to the daemon" in doctor.stdout
        as_json = json.loads(xmon(daemon, "doctor", "--json").stdout)
        assert [f["kind"] for f in as_json["host_findings"]] == ["tpu_metrics_unreachable"]
        assert as_json["jobs"] == []
        series = 'xmon_host_finding{kind="tpu_metrics_unreachable",severity="warning"} 1.0'
        assert series in daemon.scrape()
        report = json.loads(xmon(daemon, "monitor", "--once").stdout)
        (finding,) = report["findings"]
        assert finding["kind"] == "tpu_metrics_unreachable" and finding["subject"] == "tpu"
        assert {"name": "TPU chips", "value": "4"} in finding["evidence"]
    finally:
        daemon.stop()


def test_a_service_that_answers_is_no_host_finding(tmp_path: Path) -> None:
    fakes = Fakes()
    fake = fakes(scenario("v5e", 4))
    daemon = tpu_only_daemon(tmp_path, FIXTURES / "v5e-4", [fake.address])
    try:
        settled_scrape(daemon, 1)
        assert host_kinds(daemon) == []
        doctor = xmon(daemon, "doctor")
        assert doctor.returncode == 0 and "host " not in doctor.stdout, doctor.stdout
    finally:
        daemon.stop()
        fakes.stop()
