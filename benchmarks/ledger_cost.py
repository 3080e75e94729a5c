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
from support.procs import base_env, start_daemon

JOB = (
    r"""
import base64, json, sys, threading, time
import jax, jax.numpy as jnp
import xmon
mode, seconds, interval, duration = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
inner = int(sys.argv[5])  # training steps per marked step: its length
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
        for _ in range(inner):
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
    "windows": windows, "recorded": [s.duration_seconds for s in sent],
    "gap_in": max((g for t, g in gaps if inside(t)), default=0.0),
    "gap_out": max((g for t, g in gaps if not inside(t)), default=0.0),
    "samples": [base64.b64encode(s.SerializeToString()).decode() for s in sent[:3]],
}))
"""
)


def run_once(workdir: Path, socket: Path, mode: str, seconds: float, inner: int = 1) -> dict:
    script = workdir / "job.py"
    script.write_text(JOB)
    interval, duration = DEFAULT_INTERVAL, DEFAULT_DURATION
    if mode == "10x":
        interval /= 10
    env = base_env(XMON_SOCKET=str(socket), JAX_PLATFORMS="cpu", XMON_QUIET="1",
                   XMON_LEDGER_FIRST_DELAY="2")  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(script), mode, str(seconds), str(interval), str(duration),
         str(inner)],
        capture_output=True, text=True, env=env, cwd=REPO, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


# Step lengths the ledger's overhead is held to (< 0.3 % of step time at its default duty):
# a short step and a long one, each a whole number of the MLP's training steps.
STEP_LANES = {"10 ms": 0.010, "2 s": 2.0}
LANE_SECONDS = {"10 ms": 40.0, "2 s": 24.0}  # per run: the long lane's run holds one sample


def lane_rows(workdir: Path, socket: Path, one_step: float, repetitions: int) -> list[list[str]]:
    """Per step length: the cost of one sample (the sampler thread's time and the extra time of
    the steps it overlapped) spread over the default duty's spacing after such a sample (a long
    sample waits longer: xmon.agent.sampler.next_delay), as a share of the job's time."""
    from xmon.agent.sampler import LedgerConfig, next_delay

    rows = []
    quick = repetitions == 1
    for label, target in STEP_LANES.items():
        if quick and target > 1.0:
            continue  # a quick run only checks the lanes run
        inner = max(1, round(target / one_step))
        seconds = 6.0 if quick else LANE_SECONDS[label]
        off = [run_once(workdir, socket, "off", seconds, inner) for _ in range(repetitions)]
        on = [run_once(workdir, socket, "default", seconds, inner) for _ in range(repetitions)]
        base = summary([summary([s for _, s in r["steps"]])["median"] for r in off])["median"]
        samples = sum(len(r["windows"]) for r in on)
        if not samples:
            rows.append([label, f"{base * 1e3:.1f} ms", "0", "—", "—", "—", "—"])
            continue
        cost = sum(r["sampler_busy"] + in_sample_excess(r, base) for r in on) / samples
        recorded = summary([t for r in on for t in r["recorded"]])["median"]
        spacing = next_delay(LedgerConfig(), recorded)
        rows.append([
            label, f"{base * 1e3:.1f} ms", str(samples), f"{recorded:.2f} s",
            f"{cost * 1e3:.1f} ms", f"{spacing:.0f} s", f"{cost / spacing * 100:.3f} %",
        ])  # fmt: skip
    return rows


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

    from xmon.wire.proto import xmon_pb2

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
            medians = {m: [summary([s for _, s in r["steps"]])["median"] for r in runs[m]]
                       for m in modes}  # fmt: skip
            base = summary(medians["off"])["median"]
            lanes = lane_rows(Path(tmp), daemon.socket_path, base, repetitions)
        finally:
            daemon.stop()
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
        + "\n\nBy step length (budget: under 0.3 % of step time at the default duty). The "
        "same MLP step run k times per marked step; a sample holds whole steps, so a long step's "
        "sample lasts about a step, and the next waits longer to keep the 1 % duty "
        "(`next_delay`). Overhead = one sample's cost (the sampler thread's time and the extra "
        "time of the steps it overlapped, against the ledger-off median in the same run) over "
        "the spacing after such a sample.\n\n"
        + table(
            [
                "step",
                "median step (ledger off)",
                "samples",
                "sample length",
                "cost per sample",
                "spacing at default duty",
                "overhead",
            ],
            lanes,
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
