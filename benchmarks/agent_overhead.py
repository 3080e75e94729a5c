"""Agent overhead: step time of a real JAX training loop without and with the agent.

Runs are interleaved (off, 1 Hz, 10 Hz, off, ...) in separate processes against a real daemon,
and compared as ratios of medians from the same run. Each step blocks on its result so the
measured time is the real step time. Device synchronisations made by xmon's own threads are
counted by wrapping every synchronising jax.Array method (budget: 0).

    python benchmarks/agent_overhead.py [--quick] [--platform cpu|gpu]

On a GPU (``--platform gpu``) the model is scaled up (4096² bf16 layers, batch 4096) so a step
is device work, not dispatch, and the results go to their own section.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import MLP_TRAIN_STEP, REPO, machine, summary, table, today, write_section
from support.procs import base_env, start_daemon

JOB = (
    r"""
import json, sys, threading, time
import jax, jax.numpy as jnp
from jax._src.array import ArrayImpl
# Every jax.Array method that waits for the device or copies to host, wrapped to record calls
# made from xmon's threads. (A profile hook cannot see them: nanobind methods emit no c_call.)
SYNCING = ("block_until_ready", "__array__", "copy_to_host_async", "item", "tolist",
           "__float__", "__int__", "__bool__", "_single_device_array_to_np_array_did_copy")
syncs = []
def _is_xmon_thread():
    return threading.current_thread().name.startswith("xmon")
def _counting(name, original):
    def wrapper(self, *args, **kwargs):
        if _is_xmon_thread():
            syncs.append(name)
        return original(self, *args, **kwargs)
    return wrapper
for _name in SYNCING:
    _original = getattr(ArrayImpl, _name, None)
    if _original is not None:
        setattr(ArrayImpl, _name, _counting(_name, _original))
_value_getter = ArrayImpl._value.fget
ArrayImpl._value = property(_counting("_value", _value_getter))
mode, period, steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
width, batch, dtype = int(sys.argv[4]), int(sys.argv[5]), getattr(jnp, sys.argv[6])
import xmon
if mode == "on":
    xmon.attach(job_name="bench", period=period)
key = jax.random.key(0)
w1 = jax.random.normal(key, (width, width), dtype)
w2 = jax.random.normal(key, (width, width), dtype)
x = jax.random.normal(key, (batch, width), dtype)
"""
    + MLP_TRAIN_STEP
    + r"""for _ in range(20):
    w1, w2 = train_step(w1, w2, x)
w1.block_until_ready()
# Canary: a thread named like xmon's that does synchronise must be counted, or the count is moot.
canary = threading.Thread(target=lambda: float(w1.sum()), name="xmon-canary")
canary.start(); canary.join()
canary_syncs = len(syncs)
syncs.clear()
if mode == "on":  # measure the steady state: the first report (catalogue, HLO) is sent by now
    time.sleep(period + 0.5)
times = []
from xmon import agent as xmon_agent
agent = xmon_agent.current()
busy_before = agent.overhead_seconds if agent else 0.0
loop_start = time.perf_counter()
for _ in range(steps):
    start = time.perf_counter()
    with xmon.step():
        w1, w2 = train_step(w1, w2, x)
        w1.block_until_ready()
    times.append(time.perf_counter() - start)
elapsed = time.perf_counter() - loop_start
busy = (agent.overhead_seconds - busy_before) if agent else 0.0
# What xmon.step() itself costs the training thread, timed around an empty body.
calls = 5000
start = time.perf_counter()
for _ in range(calls):
    with xmon.step():
        pass
step_api = (time.perf_counter() - start) / calls
xmon.detach()
print(json.dumps({"times": times, "syncs": syncs, "canary": canary_syncs,
                  "busy": busy, "elapsed": elapsed, "step_api": step_api}))
"""
)


# platform -> (JAX_PLATFORMS, layer width, batch, dtype, what the results call the model)
MODELS = {
    "cpu": ("cpu", 512, 256, "float32", "2×512² layers, batch 256, f32, CPU"),
    "gpu": ("cuda", 4096, 4096, "bfloat16", "2×4096² layers, batch 4096, bf16, GPU"),
}


def run_once(
    workdir: Path, socket: Path, mode: str, period: float, steps: int, platform: str
) -> dict:
    script = workdir / "job.py"
    script.write_text(JOB)
    jax_platforms, width, batch, dtype, _ = MODELS[platform]
    env = base_env(XMON_SOCKET=str(socket), JAX_PLATFORMS=jax_platforms, XMON_QUIET="1")
    result = subprocess.run(
        [sys.executable, str(script), mode, str(period), str(steps), str(width), str(batch), dtype],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(
    quick: bool = False, platform: str = "cpu", runs: int | None = None, steps: int | None = None
) -> str:
    repetitions = runs or (1 if quick else 5)
    steps = steps or (100 if quick else 1500)
    modes = [("off", 1.0), ("on", 1.0), ("on", 0.1)]
    per_mode: dict[str, list[float]] = {f"{m}@{p}": [] for m, p in modes}
    busy: dict[str, list[float]] = {f"{m}@{p}": [] for m, p in modes}  # agent thread, s per s
    step_api: dict[str, list[float]] = {f"{m}@{p}": [] for m, p in modes}
    syncs: list[str] = []
    canaries: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_daemon(Path(tmp) / "d", period=1.0)
        try:
            for _ in range(repetitions):
                for mode, period in modes:
                    out = run_once(Path(tmp), daemon.socket_path, mode, period, steps, platform)
                    key = f"{mode}@{period}"
                    per_mode[key].append(summary(out["times"])["median"])
                    busy[key].append(out["busy"] / out["elapsed"])
                    step_api[key].append(out["step_api"])
                    syncs += out["syncs"]
                    canaries.append(out["canary"])
        finally:
            daemon.stop()
    base = summary(per_mode["off@1.0"])["median"]
    rows = []
    for key, label in (
        ("off@1.0", "no agent"),
        ("on@1.0", "agent, 1 Hz"),
        ("on@0.1", "agent, 10 Hz"),
    ):
        s = summary(per_mode[key])
        overhead = (s["median"] / base - 1) * 100
        thread = summary(busy[key])["median"]
        api = summary(step_api[key])["median"]
        direct = 100 * (thread + api / s["median"])
        rows.append(
            [
                label,
                f"{s['median'] * 1e3:.3f} ms",
                f"{s['min'] * 1e3:.3f}–{s['max'] * 1e3:.3f} ms",
                f"{overhead:+.2f} %",
                f"{thread * 1e3:.2f} ms/s",
                f"{api * 1e6:.1f} µs",
                f"{direct:.3f} %",
            ]
        )
    body = (
        f"## Agent overhead{' (GPU)' if platform == 'gpu' else ''}\n\n{today()} — {machine()}\n\n"
        f"MLP training step ({MODELS[platform][4]}), {repetitions} interleaved runs × "
        f"{steps} steps per mode, each run's median step time; overhead is the median of run "
        "medians relative to no agent; each run starts timing once the agent has sent its "
        "first report (the one-off catalogue of compiled programs). Measured directly, in the "
        "same runs: the time the agent's own thread is busy per second of training "
        "(sampling, building and queueing reports, including waits for the GIL), and what "
        "`xmon.step()` costs the training thread per step (timed around an empty body); "
        "their sum relative to the step time is the direct overhead, which the step-time "
        "ratio can only show above this machine's noise.\n\n"
        + table(
            [
                "mode",
                "median step",
                "range of run medians",
                "overhead (step time)",
                "agent thread busy",
                "xmon.step() per step",
                "direct overhead",
            ],
            rows,
        )
        + f"\n\nDevice synchronisations made by xmon threads: **{len(syncs)}** "
        f"{sorted(set(syncs))}: every synchronising `jax.Array` method (block_until_ready, "
        "_value, __array__, copy_to_host_async, item, tolist, scalar conversions) was wrapped "
        "to record calls from xmon's threads; a canary thread that does synchronise was "
        f"detected in {sum(1 for c in canaries if c)} of {len(canaries)} runs.\n"
    )
    write_section("agent-overhead" if platform == "cpu" else f"agent-overhead-{platform}", body)
    return body


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short run: checks it works")
    parser.add_argument("--platform", choices=sorted(MODELS), default="cpu")
    parser.add_argument("--runs", type=int, help="interleaved runs per mode (default 5)")
    parser.add_argument("--steps", type=int, help="steps per run (default 1500)")
    args = parser.parse_args()
    print(main(quick=args.quick, platform=args.platform, runs=args.runs, steps=args.steps))
