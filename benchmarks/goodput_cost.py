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
from procs import base_env, start_daemon

JOB = (
    r"""
import json, sys, time
import jax, jax.numpy as jnp
import xmon
from xmon import agent as xmon_agent
seconds, spans = float(sys.argv[1]), sys.argv[2] == "spans"
xmon.attach(job_name="goodput-bench", period=1.0)
agent = xmon_agent.current()
watch = agent.goodput
spent = []
original = watch.report
def timed_report():
    started = time.perf_counter()
    try:
        return original()
    finally:
        spent.append(time.perf_counter() - started)
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
print(json.dumps({"spent": spent, "busy": busy, "elapsed": elapsed, "steps": steps,
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


def row(label: str, result: dict[str, Any]) -> tuple[str, ...]:
    spent: list[float] = result["spent"]
    elapsed, busy = float(result["elapsed"]), float(result["busy"])
    account = sum(spent)
    return (
        label,
        f"{int(result['steps']) / elapsed:.0f}",
        str(len(spent)),
        f"{account / max(len(spent), 1) * 1e6:.0f} µs",
        f"{account / elapsed * 1e3:.3f} ms/s",
        f"{busy / elapsed * 1e3:.3f} ms/s",
        f"{account / busy * 100:.1f} %" if busy > 0 else "n/a",
        f"{float(result['listener']) * 1e6:.2f} µs",
        f"{float(result['ignored']) * 1e6:.2f} µs",
    )


MODES = (("steps", "steps only"), ("spans", "a span and a compile event every step"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds = 5.0 if args.quick else 30.0
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp))
        try:
            rows = [row(label, run(daemon.socket_path, seconds, mode)) for mode, label in MODES]
        finally:
            daemon.stop()
    header = ("mode", "steps/s", "reports", "account per report", "account per second",
              "agent thread busy", "account share of it", "listener, kept event",
              "listener, other event")  # fmt: skip
    body = (
        f"## Goodput account cost\n\n{today()} — {machine()}\n\n"
        f"A real JAX loop of short blocking steps with the agent attached (1 report/s) for "
        f"{seconds:.0f} s per mode. Timed in the same run: every call of the account's report "
        "on the agent's thread (folding the step begins since the last report, the stall "
        "check, the buckets) beside the agent thread's whole busy time; and, on the job's "
        "thread, one jax.monitoring duration event through the account's listener (a compile "
        "phase it keeps, and an event it ignores).\n\n" + table(header, rows)
    )
    write_section("goodput-cost", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
