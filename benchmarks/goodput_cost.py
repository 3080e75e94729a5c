"""What the wall-time account (xmon.agent.goodput) costs the agent's thread.

Runs a real JAX training loop of short steps (the agent overhead benchmark's MLP, each step
blocking on its result, about a thousand steps a second at batch 32) with the agent attached
to a real daemon, and times, in the same run, every call of the account's report (folding the
step begins since the last report, the stall check, the buckets) beside the agent thread's
whole busy time. A second mode puts a checkpoint-like span and a compile event into the
account every step, the most it is ever fed. Listeners run on the job's threads: what one
costs is timed around 100,000 calls.

    python benchmarks/goodput_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import MLP_TRAIN_STEP, REPO, machine, table, today, write_section
from support.procs import base_env, start_daemon

JOB = (
    r"""
import json, sys, time
import jax, jax.numpy as jnp
import xmon
from xmon import agent as xmon_agent
from xmon.wire.proto import xmon_pb2
seconds, mode = float(sys.argv[1]), sys.argv[2]
spans = mode == "spans"
xmon.attach(job_name="goodput-bench", period=1.0)
agent = xmon_agent.current()
watch = agent.goodput
spent, cpu = [], []
original = watch.report
if mode == "without":  # the same agent, its account not kept: an empty one sent instead
    original = xmon_pb2.GoodputAccount
def timed_report():
    started, started_cpu = time.perf_counter(), time.thread_time()
    try:
        return original()
    finally:
        spent.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
watch.report = timed_report
key = jax.random.key(0)
w1 = jax.random.normal(key, (256, 256))
w2 = jax.random.normal(key, (256, 256))
x = jax.random.normal(key, (32, 256))
"""
    + MLP_TRAIN_STEP
    + r"""for _ in range(20):
    w1, w2 = train_step(w1, w2, x)
w1.block_until_ready()
time.sleep(1.5)
spent.clear()
cpu.clear()
busy_before, steps = agent.overhead_seconds, 0
started = time.perf_counter()
while time.perf_counter() - started < seconds:
    with xmon.step():
        w1, w2 = train_step(w1, w2, x)
        w1.block_until_ready()
    if spans:
        with xmon.checkpointing("save"):
            pass
        watch.on_duration("/jax/core/compile/backend_compile_duration", 1e-5)
    steps += 1
elapsed = time.perf_counter() - started
busy = agent.overhead_seconds - busy_before
calls = 100_000
t = time.perf_counter()
for _ in range(calls):
    watch.on_duration("/jax/core/compile/backend_compile_duration", 1e-6)
listener = (time.perf_counter() - t) / calls
t = time.perf_counter()
for _ in range(calls):
    watch.on_duration("/jax/pjit/some_other_event", 1e-6)
ignored = (time.perf_counter() - t) / calls
xmon.detach()
print(json.dumps({"spent": spent, "cpu": cpu, "busy": busy, "elapsed": elapsed, "steps": steps,
                  "listener": listener, "ignored": ignored}))
"""
)


def run(daemon_socket: Path, seconds: float, mode: str) -> dict[str, Any]:
    env = base_env(XMON_SOCKET=str(daemon_socket), JAX_PLATFORMS="cpu")
    command = [sys.executable, "-c", JOB, str(seconds), mode]
    out = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=seconds + 120, check=True)  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def merged(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one mode as one: their reports, seconds, steps and busy time together."""
    out: dict[str, Any] = {"spent": [], "cpu": [], "busy": 0.0, "elapsed": 0.0, "steps": 0}
    for result in results:
        for key in ("spent", "cpu"):
            out[key] += result[key]
        for key in ("busy", "elapsed", "steps"):
            out[key] += result[key]
    out["listener"] = min(r["listener"] for r in results)
    out["ignored"] = min(r["ignored"] for r in results)
    return out


def row(label: str, result: dict[str, Any], without: dict[str, Any]) -> tuple[str, ...]:
    spent: list[float] = result["spent"]
    elapsed, busy = float(result["elapsed"]), float(result["busy"])
    rate, base_rate = result["steps"] / elapsed, without["steps"] / without["elapsed"]
    base_busy = float(without["busy"]) / float(without["elapsed"])
    reports = max(len(spent), 1)
    return (
        label,
        f"{rate:.0f} ({(rate / base_rate - 1) * 100:+.1f} %)",
        str(len(spent)),
        f"{sum(result['cpu']) / reports * 1e6:.0f} µs",
        f"{sum(spent) / reports * 1e6:.0f} µs",
        f"{busy / elapsed * 1e3:.3f} ms/s ({(busy / elapsed - base_busy) * 1e3:+.3f})",
        f"{float(result['listener']) * 1e6:.2f} µs",
        f"{float(result['ignored']) * 1e6:.2f} µs",
    )


MODES = (
    ("without", "without the account (an empty one sent)"),
    ("steps", "steps only"),
    ("spans", "a span and a compile event every step"),
)
ROUNDS = 2  # the modes run in turn, twice: a machine that slows down slows each alike


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds = 5.0 if args.quick else 15.0
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode, _ in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp))
        try:
            for _ in range(1 if args.quick else ROUNDS):
                for mode, _label in MODES:
                    results[mode].append(run(daemon.socket_path, seconds, mode))
        finally:
            daemon.stop()
    without = merged(results["without"])
    rows = [row(label, merged(results[mode]), without) for mode, label in MODES]
    header = ("mode", "steps/s (vs without)", "reports", "report, CPU", "report, wall",
              "agent thread busy (vs without)", "listener, kept event",
              "listener, other event")  # fmt: skip
    body = (
        f"## Goodput account cost\n\n{today()} — {machine()}\n\n"
        f"A real JAX loop of short blocking steps with the agent attached (1 report/s), "
        f"{seconds:.0f} s per run, the modes in turn ({1 if args.quick else ROUNDS} rounds). "
        "Without the account, the agent sends an empty one: the same agent, the same run. "
        "Timed on the agent's thread: each report of the account (folding the step begins, "
        "the stall check, the buckets), as the thread's CPU time and as wall time (which "
        "includes waiting for the GIL while the job's thread holds it), and the thread's whole "
        "busy time; on the job's thread, one jax.monitoring duration event through the "
        "account's listener (a compile phase it keeps, and an event it ignores).\n\n"
        + table(header, rows)
    )
    write_section("goodput-cost", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
