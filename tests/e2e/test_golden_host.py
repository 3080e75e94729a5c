"""Golden /metrics of fixture TPU hosts, end to end through a real daemon (node_exporter style).

The daemon reads a fixture sysfs/procfs tree and polls fake libtpu metrics servers; its
/metrics is diffed with tests/golden/host_<name>.txt after masking what changes from run to
run (times, durations, versions, the servers' ports). After an intentional change, rerun with
``XMON_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from support.fakes.libtpu_server import FakeLibtpu, Fakes, scenario
from support.fakes.tpu_daemon import settled_scrape, tpu_only_daemon
from support.fakes.tpu_host import FIXTURES, HOSTS, write_host

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
VOLATILE = ("xmon_daemon_start_time_seconds", "xmon_snapshot_timestamp_seconds",
            "xmon_collector_duration_seconds")  # fmt: skip
PROCESS = ("process_", "# HELP process_", "# TYPE process_")


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    started = Fakes()
    yield started
    started.stop()


def masked(text: str, fakes: list[FakeLibtpu]) -> str:
    for i, fake in enumerate(fakes):
        text = text.replace(fake.address, f"FAKE{i}")
    text = re.sub(r'(?<![a-z_])(python_version|version)="[^"]*"', r'\1="X"', text)
    lines = []
    for line in text.splitlines():
        if line.startswith(PROCESS):
            continue  # the daemon's own CPU, memory and descriptors differ on every run
        if line.startswith(VOLATILE):
            line = line.rsplit(" ", 1)[0] + " X"
        lines.append(line)
    return "\n".join(lines) + "\n"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"host_{name}.txt"
    if os.environ.get("XMON_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"no {path.name}: rerun with XMON_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"/metrics changed: rerun with XMON_UPDATE_GOLDEN=1 ({name})"


def promtool_clean(text: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=30)  # fmt: skip
    assert result.returncode == 0 and not result.stdout + result.stderr, result.stderr


def test_v5e_4_host(fakes: Fakes, tmp_path: Path) -> None:
    """One JAX process on four v5e chips, metrics at an address given in the config."""
    fake = fakes(scenario("v5e", 4))
    daemon = tpu_only_daemon(tmp_path, FIXTURES / "v5e-4", [fake.address])
    try:
        text = settled_scrape(daemon, 1)
    finally:
        daemon.stop()
    promtool_clean(text)
    check_golden("v5e-4", masked(text, [fake]))


def test_v6e_8_multislice_host(fakes: Fakes, tmp_path: Path) -> None:
    """Two processes with four v6e chips each, serving on the ports their environment names."""
    servers = [fakes(scenario("v6e", 4, multislice=True)) for _ in range(2)]
    host = HOSTS["v6e-8"]
    procs = tuple(
        replace(p, environ={**p.environ, "TPU_RUNTIME_METRICS_PORTS": f.address.rsplit(":")[-1]})
        for p, f in zip(host.procs, servers, strict=True)
    )
    root = write_host(tmp_path / "host", replace(host, procs=procs))
    daemon = tpu_only_daemon(tmp_path, root, [])
    try:
        text = settled_scrape(daemon, 2)
    finally:
        daemon.stop()
    promtool_clean(text)
    check_golden("v6e-8", masked(text, servers))
