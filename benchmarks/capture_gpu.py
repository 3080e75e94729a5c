"""Capture cost and content: what a trace costs the job, and that it shows the device's ops.

Two parts, on whatever backend jax finds (run it on a GPU machine; on CPU it measures the host
side only):

1. In process, the calls the agent makes: ``jax.profiler.start_trace`` / ``stop_trace`` around a
   bf16 matmul loop, several times; their wall time, the step-time change while tracing, and the
   trace's size. The XSpace is checked with xprof: on GPU the trace viewer must contain device
   events (``/device:GPU:0``) with the jitted program's kernels.
2. End to end: a real daemon and a job attached with ``xmon run``; ``xmon capture`` is timed
   from the shell.

Writes the "capture-cost" section of docs/benchmarks.md.   Usage: python benchmarks/capture_gpu.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, machine, ms, summary, table, today, write_section
from support.procs import base_env, start_daemon, start_job, wait_for

REPEATS = 5
TRACE_SECONDS = 2.0  # the budget's capture: `xmon capture --duration 2s` in at most 3.5 s
NO_DEVICE_PLANE = (
    " (none: no device plane on this backend; run this script on a GPU machine for device ops)."
)

IN_PROCESS = r"""
import json, sys, time, glob, pathlib
import jax, jax.numpy as jnp
out, repeats, trace_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
n = 4096 if jax.default_backend() == "gpu" else 512
a = jnp.ones((n, n), jnp.bfloat16)

@jax.jit
def train_step(a):
    return jnp.tanh(a @ a)

def steps(seconds):
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        train_step(a).block_until_ready()
        times.append(time.perf_counter() - t)
    return times

steps(1.0)
options = jax.profiler.ProfileOptions(); options.python_tracer_level = 0
result = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
          "jax": jax.__version__, "start": [], "stop": [], "bytes": [], "plain": steps(2.0),
          "traced": []}
for i in range(repeats):
    d = f"{out}/run{i}"
    t = time.perf_counter(); jax.profiler.start_trace(d, profiler_options=options)
    result["start"].append(time.perf_counter() - t)
    result["traced"] += steps(trace_s)
    t = time.perf_counter(); jax.profiler.stop_trace()
    result["stop"].append(time.perf_counter() - t)
    [xplane] = glob.glob(f"{d}/plugins/profile/*/*.xplane.pb")
    session = pathlib.Path(xplane).parent
    result["bytes"].append(sum(p.stat().st_size for p in session.iterdir()))
    result["xplane"] = xplane
json.dump(result, open(f"{out}/result.json", "w"))
"""

JOB = r"""
import os, pathlib, time, jax, jax.numpy as jnp, xmon
n = 4096 if jax.default_backend() == "gpu" else 512
a = jnp.ones((n, n), jnp.bfloat16)
train_step = jax.jit(lambda a: jnp.tanh(a @ a))
stop = pathlib.Path(os.environ["JOB_STOP"])
while not stop.exists():
    with xmon.step():
        train_step(a).block_until_ready()
"""


def device_events(xplane: str) -> tuple[int, list[str]]:
    """Trace-viewer events on device planes, and a few of their names (xprof's converter)."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "trace_viewer", {})
    trace = json.loads(data)
    devices = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "M"
               and "/device:" in str(e.get("args", {}).get("name", ""))}  # fmt: skip
    events = [e for e in trace["traceEvents"] if e.get("pid") in devices and e.get("ph") == "X"]
    return len(events), sorted({e["name"] for e in events})[:5]


def in_process(work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    script = work / "in_process.py"
    script.write_text(IN_PROCESS)
    subprocess.run([sys.executable, str(script), str(work), str(REPEATS), str(TRACE_SECONDS)],
                   check=True, env=base_env())  # fmt: skip
    return json.loads((work / "result.json").read_text())


def end_to_end(work: Path) -> list[float]:
    daemon = start_daemon(work / "daemon", env={"XMON_PROFILING": '{"triggers": false}'})
    stop = work / "stop"
    job = start_job(work, daemon.socket_path, JOB, "bench", devices=1, JOB_STOP=str(stop))
    env = base_env(XMON_SOCKET=str(daemon.socket_path))
    try:
        wait_for(lambda: "jit" in subprocess.run([sys.executable, "-m", "xmon", "programs"],
                 capture_output=True, text=True, env=env).stdout, 180, "the job")  # fmt: skip
        walls = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            command = [sys.executable, "-m", "xmon", "capture", "--duration", f"{TRACE_SECONDS}s"]
            subprocess.run(command, check=True, env=env, capture_output=True)
            walls.append(time.perf_counter() - started)
        return walls
    finally:
        stop.touch()
        job.popen.wait(60)
        daemon.stop()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        r = in_process(work / "in_process")
        count, names = device_events(r["xplane"])
        walls = end_to_end(work / "e2e")
    plain, traced = summary(r["plain"]), summary(r["traced"])
    rows = [
        ("start_trace", ms(summary(r["start"])["median"]), ms(max(r["start"]))),
        ("stop_trace (writes the files)", ms(summary(r["stop"])["median"]), ms(max(r["stop"]))),
        ("step, not tracing", ms(plain["median"]), ms(plain["p99"])),
        ("step, while tracing", ms(traced["median"]), ms(traced["p99"])),
        (f"`xmon capture --duration {TRACE_SECONDS:g}s` from the shell (with the CLI's start-up)",
         ms(summary(walls)["median"]), ms(max(walls))),
    ]  # fmt: skip
    gpu = r["backend"] == "gpu"
    body = "\n".join([
        "## Capture cost" + (" (GPU)" if gpu else ""), "", f"{today()} — {machine()}", "",
        f"jax {r['jax']}, backend `{r['backend']}` ({r['device']}); bf16 matmul step; "
        f"{REPEATS} traces of {TRACE_SECONDS:g} s, Python tracer off (as the agent traces).", "",
        table(("what", "median", "worst/p99"), rows), "",
        f"Trace files per capture: {summary(r['bytes'])['median'] / 1024:.0f} KiB (median). "
        f"Device events in the trace viewer: {count}"
        + (f", e.g. {', '.join(names)}." if names else NO_DEVICE_PLANE),
    ])  # fmt: skip
    write_section("capture-cost-gpu" if gpu else "capture-cost", body)
    print(body)
    return 0


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
