"""The metric table follows Prometheus naming rules; docs/metrics.md is generated from it."""

from __future__ import annotations

import subprocess
import sys

from xmon.exporters.metrics_table import render_markdown


def test_module_main_prints_the_docs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "xmon.exporters.metrics_table"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out == render_markdown()
