"""The benchmarks still run: ``benchmarks/run --quick``, each writing its results section.

Figures from a quick run mean little; this only proves every script works end to end against
the real daemon, job and tools. Results go to a scratch page, never to docs/benchmarks.md.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


BENCHMARKS: dict[str, Any] = runpy.run_path(str(REPO / "benchmarks" / "run"))["BENCHMARKS"]
# Wall seconds of each quick run on a 2-core machine, so that a parallel run starts the long
# ones first; the rest take under 30 s.
QUICK_SECONDS = {
    "floods": 150, "daemon_cost": 55, "ledger_cost": 45, "scrape_latency": 40, "capture": 35,
    "top_load": 35,
}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.slow(QUICK_SECONDS[name])) if name in QUICK_SECONDS
     else name for name in BENCHMARKS],
)  # fmt: skip
def test_every_benchmark_runs_in_quick_mode(tmp_path: Path, name: str) -> None:
    needs = BENCHMARKS[name][3]
    if needs and shutil.which(needs) is None:
        pytest.skip(f"{name} needs {needs}")
    results = tmp_path / "benchmarks.md"
    env = {**os.environ, "XMON_BENCHMARK_RESULTS": str(results)}
    env.pop("XLA_FLAGS", None)  # the benchmarks choose their own device counts
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run"), "--quick", name],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert re.search(rf"^== {name}: exit 0", run.stdout, re.MULTILINE), run.stdout
    written = [page.read_text() for page in tmp_path.glob("*.md")]  # benchmarks.md, fidelity.md
    assert any("<!-- begin " in page or "| " in page for page in written), "it wrote no results"


STAND_IN_EXPORTER = """
import sys, time
from prometheus_client import Gauge, start_http_server
gauge = Gauge("stand_in_gpu_utilization_ratio", "A GPU exporter's kind of gauge.", ["gpu"])
start_http_server(int(sys.argv[1]), addr="127.0.0.1")
while True:
    for gpu in range(8):
        gauge.labels(str(gpu)).set(time.time() % 1)
    time.sleep(1)
"""


def test_gpu_exporters_side_by_side_runs_against_a_stand_in(tmp_path: Path) -> None:
    """Without a GPU, nvitop-exporter cannot start; the comparison's mechanics run against a
    prometheus_client exporter instead, so the script is known to work before a GPU run."""
    results = tmp_path / "benchmarks.md"
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN_EXPORTER)
    env = {**os.environ, "XMON_BENCHMARK_RESULTS": str(results)}
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_exporters.py"), "--quick",
         "--other", f"{{python}} {stand_in} {{port}}", "--name", "stand-in"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    page = results.read_text()
    assert "<!-- begin gpu-exporters -->" in page
    rows = dict(
        (cells[0], cells[1:])
        for cells in (
            [c.strip() for c in line.strip("|").split("|")]
            for line in page.splitlines()
            if line.startswith("| ")
        )
    )
    assert int(rows["series"][1]) >= 8, rows  # the stand-in's 8 GPUs were scraped
    assert rows["scrape p99 (gzip)"][0].endswith(" ms") and "MiB" in rows["RSS (USS)"][1]


def test_the_gpu_lane_would_run() -> None:
    """The GPU lane's dry run: its tests collect, its files exist, its wheels are pinned."""
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_lane"), "--dry-run"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    steps = [line.split()[2] for line in done.stdout.splitlines() if line.startswith("would run")]
    assert steps == ["gpu_tests", "backend_tests", "agent_overhead_gpu", "capture", "gpu_check",
                     "gpu_exporters", "record_samples"], done.stdout  # fmt: skip
