"""The nvml collector: absent for real here, and its NVML mapping against a pynvml stand-in.

Without a GPU this machine still has the real nvidia-ml-py, whose nvmlInit fails (no driver):
that path runs for real, in-process and in a real daemon. The mapping from NVML to the model
runs against ``nvml_fake.FakeNvml``, which answers with pynvml's own structs and error classes.
Real-hardware checks are in test_nvml_gpu.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from prometheus_client.exposition import generate_latest

from xmon.collectors.nvml import (
    NVML_LIBRARY,
    nvml_library_loads,
)
from xmon.exporters.prometheus import SnapshotCollector
from xmon.model import Snapshot

from support.nvml_snapshots import fixture_snapshot
from support.procs import Daemon, wait_for

# --- absent, for real ------------------------------------------------------------------------


def test_without_the_nvml_library_pynvml_is_never_imported() -> None:
    if nvml_library_loads():
        pytest.skip(f"{NVML_LIBRARY} loads on this machine")
    code = (
        "import sys\n"
        "from xmon.collectors import CollectContext, CollectorRunner\n"
        "runner = CollectorRunner(['nvml', 'host', 'tpu'], timeout=5.0)\n"
        "for t in (0.0, 1.0, 120.0):\n"
        "    output, health = runner.run(CollectContext(monotonic=t))\n"
        "runner.close()\n"
        "assert not [h for h in health if h.name == 'nvml' and h.present], health\n"
        "assert 'pynvml' not in sys.modules, 'pynvml imported without an NVIDIA driver'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_daemon_reports_nvml_absent_cleanly(daemon: Daemon) -> None:
    def nvml_lines() -> list[str]:
        lines = [line for line in daemon.scrape().splitlines() if 'collector="nvml"' in line]
        return lines if any(line.startswith("xmon_collector_present") for line in lines) else []

    lines = set(wait_for(nvml_lines, 30, "the nvml collector's health in /metrics"))
    assert {'xmon_collector_up{collector="nvml"} 1.0',
            'xmon_collector_present{collector="nvml"} 0.0',
            'xmon_collector_errors_total{collector="nvml"} 0.0'} <= lines  # fmt: skip
    log = daemon.log()
    assert "Traceback" not in log
    assert [line for line in log.splitlines() if "nvml" in line and "WARNING" in line] == []


# --- exposition of a fixture host -------------------------------------------------------------


def exposition(snapshot: Snapshot) -> str:
    text = generate_latest(SnapshotCollector(50, snapshot)).decode()
    return re.sub(r'python_version="[^"]*"', 'python_version="X"', text)


def test_promtool_check_metrics_is_clean() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    text = exposition(fixture_snapshot())
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=30)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
