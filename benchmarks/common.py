"""Shared helpers for xmon's benchmarks: statistics, machine description, the results page."""

from __future__ import annotations

import compileall
import datetime as dt
import os
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
# The results page; elsewhere for a check that the benchmarks still run (tests, CI).
RESULTS = Path(os.environ.get("XMON_BENCHMARK_RESULTS") or REPO / "docs" / "benchmarks.md")
sys.path.insert(0, str(REPO / "tests"))  # reuse the real-process helpers of the e2e tests


def cpu_seconds(process: psutil.Process) -> float:
    """A process's CPU time so far, user and system."""
    times = process.cpu_times()
    return times.user + times.system


def tmux(server: Path, *args: str) -> str:
    """A tmux command on the private server at ``server``; its output."""
    result = subprocess.run(["tmux", "-S", str(server), *args], capture_output=True, text=True)
    return result.stdout


def compile_bytecode() -> None:
    """Byte-compile xmon as installing it does, so that start-up and memory figures do not
    include compiling its source (which a checkout run with PYTHONDONTWRITEBYTECODE=1 would
    do at every start)."""
    compileall.compile_dir(REPO / "xmon", quiet=1)


compile_bytecode()


# The benchmarks' training step, for the job scripts they run: a 2-layer MLP's gradient step.
MLP_TRAIN_STEP = r"""
@jax.jit
def train_step(w1, w2, x):
    def loss(w1, w2):
        return jnp.mean(jnp.tanh(jnp.tanh(x @ w1) @ w2) ** 2)
    g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 0.01 * g1, w2 - 0.01 * g2
"""


def summary(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {
        "n": float(len(ordered)),
        "median": statistics.median(ordered),
        "p99": p99,
        "min": ordered[0],
        "max": ordered[-1],
        "stdev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
    }


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs ({cpu}), {memory:.0f} GiB, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def today() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section between markers for ``name`` in docs/benchmarks.md."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    text = RESULTS.read_text() if RESULTS.exists() else "# xmon benchmarks\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else f"{text}\n{block}\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"
