"""The Prometheus exporter against real prometheus_client, a real HTTP server and promtool."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from xmon.exporters.prometheus import MetricsEndpoint

from support.sample_snapshots import snapshot

# --- promtool --------------------------------------------------------------------------------


def test_promtool_check_metrics_is_clean() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    endpoint = MetricsEndpoint()
    endpoint.update(snapshot())
    result = subprocess.run(
        [promtool, "check", "metrics"], input=endpoint.body(), capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout + result.stderr == b""


# --- golden file and timing ------------------------------------------------------------------


def test_exporter_does_not_import_jax() -> None:
    code = "import sys, xmon.exporters.prometheus; assert 'jax' not in sys.modules, 'jax'"
    subprocess.run([sys.executable, "-c", code], check=True)
