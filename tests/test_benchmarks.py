"""The benchmarks still run: ``benchmarks/run --quick``, each writing its results section.

Figures from a quick run mean little; this only proves every script works end to end against
the real daemon, job and tools. Results go to a scratch page, never to docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.e2e


def test_every_benchmark_runs_in_quick_mode(tmp_path: Path) -> None:
    results = tmp_path / "benchmarks.md"
    env = {**os.environ, "XMON_BENCHMARK_RESULTS": str(results)}
    env.pop("XLA_FLAGS", None)  # the benchmarks choose their own device counts
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run"), "--quick"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    ran = re.findall(r"^== (\w+): exit 0", run.stdout, re.MULTILINE)
    assert {"agent_overhead", "daemon_cost", "scrape_latency", "capture"} <= set(ran), run.stdout
    page = results.read_text()
    for section in ("agent-overhead", "daemon-cost", "scrape-latency", "capture-cost"):
        assert f"<!-- begin {section} -->" in page, section
