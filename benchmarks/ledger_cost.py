"""Execution ledger cost: what periodic in-memory profiler samples cost the job and the daemon.

Runs a real JAX training loop (the agent overhead benchmark's MLP, each step blocking on its
result) against a real daemon, interleaving runs with the agent's ledger off, at its default
duty cycle, and at 10× that duty, and compares them as ratios of medians from the same run.
Measured directly in each run:

* the sampler thread's own time per second (opening and stopping sessions),
* the extra time of steps that overlapped a sample (how much the profiler slows the job while
  it records), over the run's length,
* the longest the job's thread waited for the GIL during a sample, and outside them (a ticker
  thread's longest gap),
* each sample's size, and what parsing it costs the daemon (timed here on the same bytes with
  the daemon's parser), for 4 agents at the default pace, beside the daemon's idle budget.

    python benchmarks/ledger_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xmon.agent.sampler import DEFAULT_DURATION, DEFAULT_INTERVAL
from xmon.execution.samples import parse_sample

from common import MLP_TRAIN_STEP, REPO, machine, summary, table, today, write_section
from procs import base_env, start_daemon

JOB = (
    r"""
import base64, json, sys, threading, time
import jax, jax.numpy as jnp
import xmon
mode, seconds, interval, duration = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
xmon.attach(job_name="bench", ledger=mode != "off",
            ledger_interval=float(interval), ledger_duration=float(duration))
agent = xmon.agent.current()
sent = []  # the samples, as the agent hands them to its transport
send = agent.sampler._send
windows = []
def keep(sample):
    sent.append(sample)
    windows.append((sample.started_at, sample.started_at + sample.duration_seconds))
    return send(sample)
agent.sampler._send = keep
key = jax.random.key(0)
w1 = jax.random.normal(key, (512, 512)); w2 = jax.random.normal(key, (512, 512))
x = jax.random.normal(key, (256, 512))
"""
    + MLP_TRAIN_STEP
    + r"""for _ in range(20):
    w1, w2 = train_step(w1, w2, x)
w1.block_until_ready()
gaps = []  # (wall time, longest wait for the GIL in that tick)
stop = False
def ticker():
    last = time.perf_counter()
    while not stop:
        time.sleep(0.001)
        now = time.perf_counter()
        gaps.append((time.time(), now - last - 0.001))
        last = now
tick = threading.Thread(target=ticker, daemon=True); tick.start()
steps = []  # (wall start, seconds)
busy_before = agent.sampler.busy_seconds
loop_start = time.perf_counter()
while time.perf_counter() - loop_start < seconds:
    wall, start = time.time(), time.perf_counter()
    with xmon.step():
        w1, w2 = train_step(w1, w2, x)
        w1.block_until_ready()
    steps.append((wall, time.perf_counter() - start))
elapsed = time.perf_counter() - loop_start
stop = True; tick.join()
sampler_busy = agent.sampler.busy_seconds - busy_before
skipped = agent.sampler.skipped_total
xmon.detach()
def inside(t):
    return any(a <= t <= b for a, b in windows)
print(json.dumps({
    "steps": steps, "elapsed": elapsed, "sampler_busy": sampler_busy, "skipped": skipped,
    "windows": windows,
    "gap_in": max((g for t, g in gaps if inside(t)), default=0.0),
    "gap_out": max((g for t, g in gaps if not inside(t)), default=0.0),
    "samples": [base64.b64encode(s.SerializeToString()).decode() for s in sent[:3]],
}))
"""
)


def run_once(workdir: Path, socket: Path, mode: str, seconds: float) -> dict:
    script = workdir / "job.py"
    script.write_text(JOB)
    interval, duration = DEFAULT_INTERVAL, DEFAULT_DURATION
    if mode == "10x":
        interval /= 10
    env = base_env(XMON_SOCKET=str(socket), JAX_PLATFORMS="cpu", XMON_QUIET="1",
                   XMON_LEDGER_FIRST_DELAY="2")  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(script), mode, str(seconds), str(interval), str(duration)],
        capture_output=True, text=True, env=env, cwd=REPO, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def in_sample_excess(out: dict, base_step: float) -> float:
    """Seconds the steps that overlapped a sample took beyond the ledger-off median."""
    excess = 0.0
    for wall, seconds in out["steps"]:
        if any(a <= wall + seconds and wall <= b for a, b in out["windows"]):
            excess += max(0.0, seconds - base_step)
    return excess


def parse_cost(encoded: list[str]) -> tuple[float, float]:
    """Median bytes and daemon parse seconds of the run's samples."""
    import base64

    from xmon.proto import xmon_pb2

    sizes, times = [], []
    for text in encoded:
        sample = xmon_pb2.ExecutionSample.FromString(base64.b64decode(text))
        started = time.perf_counter()
        parse_sample(sample.xspace, sample.started_at, sample.duration_seconds,
                     tuple(sample.step_begin_seconds), sample.steps_marked)  # fmt: skip
        times.append(time.perf_counter() - started)
        sizes.append(len(sample.xspace))
    return summary(sizes)["median"], summary(times)["median"]


def main(quick: bool = False) -> str:
    repetitions, seconds = (1, 8.0) if quick else (2, 60.0)
    modes = ("off", "default", "10x")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp) / "d", period=1.0)
        try:
            for _ in range(repetitions):
                for mode in modes:
                    runs[mode].append(run_once(Path(tmp), daemon.socket_path, mode, seconds))
        finally:
            daemon.stop()
    medians = {m: [summary([s for _, s in r["steps"]])["median"] for r in runs[m]] for m in modes}
    base = summary(medians["off"])["median"]
    rows, encoded = [], []
    for mode, label in (("off", "ledger off"), ("default", "default duty"),
                        ("10x", "10× duty")):  # fmt: skip
        step = summary(medians[mode])["median"]
        elapsed = sum(r["elapsed"] for r in runs[mode])
        thread = sum(r["sampler_busy"] for r in runs[mode]) / elapsed
        slowed = sum(in_sample_excess(r, base) for r in runs[mode]) / elapsed
        samples = sum(len(r["windows"]) for r in runs[mode])
        gap_in = max(r["gap_in"] for r in runs[mode])
        gap_out = max(r["gap_out"] for r in runs[mode])
        encoded += [s for r in runs[mode] for s in r["samples"]]
        rows.append([
            label, samples, f"{step * 1e3:.3f} ms", f"{(step / base - 1) * 100:+.2f} %",
            f"{thread * 1e3:.3f} ms/s", f"{slowed * 100:.3f} %",
            f"{(thread + slowed) * 100:.3f} %",
            f"{gap_in * 1e3:.1f} ms" if samples else "—", f"{gap_out * 1e3:.1f} ms",
        ])  # fmt: skip
    size, parse = parse_cost(encoded) if encoded else (0.0, 0.0)
    daemon_share = 4 * parse / DEFAULT_INTERVAL * 100
    body = (
        f"## Execution ledger\n\n{today()} — {machine()}\n\n"
        f"MLP training step (2×512² layers, batch 256, f32, CPU, each step blocking on its "
        f"result), {repetitions} interleaved runs × {seconds:.0f} s per mode; the default duty "
        f"is a {DEFAULT_DURATION} s sample every {DEFAULT_INTERVAL:.0f} s (±20 %), 10× duty "
        f"every {DEFAULT_INTERVAL / 10:.0f} s. Direct overhead = the sampler thread's own time "
        "(opening and stopping sessions) + the extra time of steps that overlapped a sample "
        "(the profiler slowing the job while it records), both per second of training. The "
        "longest GIL wait is a 1 ms ticker thread's longest extra gap, during samples and "
        "outside them.\n\n"
        + table(
            [
                "mode",
                "samples",
                "median step",
                "overhead (step time)",
                "sampler thread",
                "steps slowed by sampling",
                "direct overhead",
                "longest GIL wait in a sample",
                "longest GIL wait outside",
            ],
            rows,
        )  # fmt: skip
        + f"\n\nA sample of this job is {size / 1024:.0f} KiB of XSpace (median); the daemon "
        f"parses one in {parse * 1e3:.1f} ms. For 4 such agents at the default pace that is "
        f"{daemon_share:.2f} % of one core, beside the daemon's idle budget of 0.5 % "
        "(Daemon cost).\n"
    )
    write_section("ledger-cost", body)
    return body


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short run: checks it works")
    print(main(quick=parser.parse_args().quick))
