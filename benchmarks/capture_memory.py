"""Capture memory and latency: what trace captures leave in the job, and how long one takes.

Two copies of the same JAX training job (an MLP on 4 virtual CPU devices, agent attached) run
against a real daemon; one is captured N times (`Control.Capture`, as `xmon capture` does), the
other is its untraced twin. The job's RSS growth over the captures minus the twin's is what the
captures cost it (budget: < 50 MiB). Then capture latency (request to files, and the part the
agent reports for starting the trace and writing it) on a quiet host and on a host loaded with
one CPU-burning process per core, each started by this script and ending by itself.

    python benchmarks/capture_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xmon.wire.client import DaemonClient

from common import MLP_TRAIN_STEP, machine, summary, table, today, write_section
from support.procs import Proc, base_env, spawn, start_daemon, wait_for

BUDGET_BYTES = 50 * 2**20
NOTE = (
    "The agent gives back what the profiler freed after each trace (`malloc_trim`), w"
    "hich also returns what the job itself had freed, hence a captured job smaller th"
    "an its twin; without it, 10 captures of 2 s of this job left 735 MB more RSS (gl"
    "ibc kept the freed XSpace in its arenas). The agent starts a trace within millis"
    "econds of the request reaching it; the rest of a request is the trace, its expor"
    "t and the second-aligned directory name."
)
JOB = (
    r"""
import os, pathlib, sys
import jax, jax.numpy as jnp
import xmon
xmon.attach(job_name=sys.argv[1])
key = jax.random.key(0)
w1 = jax.random.normal(key, (4, 512, 512)); w2 = jax.random.normal(key, (4, 512, 512))
x = jax.random.normal(key, (4, 256, 512))
"""
    + MLP_TRAIN_STEP
    + r"""pathlib.Path(sys.argv[2]).write_text(str(os.getpid()))
while True:
    with xmon.step():
        w1, w2 = train_step(w1, w2, x)
        w1.block_until_ready()
"""
)
BURN = (
    "import time, sys\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: 0"
)
AGENT_TIMES = re.compile(
    r"started (\d+(?:\.\d+)?) (ms|s) after .*, written in (\d+(?:\.\d+)?) (ms|s)"
)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def start_job(workdir: Path, socket: Path, name: str) -> tuple[Proc, int]:
    script, pid_file = workdir / "job.py", workdir / f"{name}.pid"
    script.write_text(JOB)
    env = base_env(XMON_SOCKET=str(socket), JAX_PLATFORMS="cpu",
                   XLA_FLAGS="--xla_force_host_platform_device_count=4")  # fmt: skip
    proc = spawn([sys.executable, str(script), name, str(pid_file)], workdir / f"{name}.log", env)
    wait_for(lambda: pid_file.exists() or not proc.alive(), 180, f"job {name} to start")
    if not proc.alive():
        raise RuntimeError(proc.log())
    return proc, int(pid_file.read_text())


def _seconds(value: str, unit: str) -> float:
    return float(value) / (1000 if unit == "ms" else 1)


def capture(client: DaemonClient, pid: int, seconds: float) -> tuple[float, float, float]:
    """(request to files, the agent's start, the agent's write) in seconds."""
    result = client.capture(job_pid=pid, duration_s=seconds)
    match = AGENT_TIMES.search(result.message)
    if match is None:
        return result.seconds, float("nan"), float("nan")
    return result.seconds, _seconds(*match.group(1, 2)), _seconds(*match.group(3, 4))


def memory_run(client: DaemonClient, traced: int, twin: int, n: int, seconds: float) -> dict:
    before = {traced: rss(traced), twin: rss(twin)}
    for _ in range(n):
        capture(client, traced, seconds)
        time.sleep(1.0)
    time.sleep(3.0)
    growth = {pid: rss(pid) - before[pid] for pid in before}
    return {"before": before[traced], "after": rss(traced), "twin_before": before[twin],
            "twin_after": rss(twin), "extra": growth[traced] - growth[twin]}  # fmt: skip


def latency_run(client: DaemonClient, pid: int, n: int, seconds: float, burners: int) -> list:
    procs = [subprocess.Popen([sys.executable, "-c", BURN, str(n * (seconds + 8) + 20)])
             for _ in range(burners)]  # fmt: skip
    try:
        time.sleep(1.0 if burners else 0.0)
        return [capture(client, pid, seconds) for _ in range(n)]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def report(memory: dict, quiet: list, loaded: list, n: int, seconds: float) -> str:
    rows = []
    for name, runs in (("quiet", quiet), (f"loaded ({os.cpu_count()} burners)", loaded)):
        total, start, write = (summary([r[i] for r in runs]) for i in range(3))
        rows.append([name, len(runs), f"{total['median']:.2f} s", f"{total['max']:.2f} s",
                     f"{start['median'] * 1000:.0f} ms", f"{write['median']:.2f} s"])  # fmt: skip
    verdict = "within" if memory["extra"] < BUDGET_BYTES else "OVER"
    return "\n".join([
        "## Capture memory and latency", "",
        f"{machine()}; {today()}. `benchmarks/capture_memory.py`: a training job (MLP, 4 virtual "
        f"CPU devices) captured {n} × {seconds:g} s against its untraced twin.", "",
        table(["job", "RSS before", "RSS after"], [
            ["captured", mib(memory["before"]), mib(memory["after"])],
            ["untraced twin", mib(memory["twin_before"]), mib(memory["twin_after"])]]),
        "",
        f"Growth beyond the twin's: **{mib(memory['extra'])}** ({verdict} the 50 MiB budget).",
        "",
        NOTE,
        "",
        table(["host", "captures", "request to files p50", "max", "agent start p50",
               "agent write p50"], rows),
    ])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 captures of 1 s, 1 loaded")
    args = parser.parse_args()
    n, seconds, loaded_n = (3, 1.0, 1) if args.quick else (10, 2.0, 5)
    with tempfile.TemporaryDirectory(prefix="xmon-capmem-") as tmp:
        workdir = Path(tmp)
        settings = json.dumps({"triggers": False})
        daemon = start_daemon(workdir / "daemon", env={"XMON_PROFILING": settings})
        jobs = [start_job(workdir, daemon.socket_path, name) for name in ("traced", "twin")]
        try:
            time.sleep(10.0 if args.quick else 30.0)  # compiled, warmed, first ledger samples
            with DaemonClient(daemon.socket_path) as client:
                memory = memory_run(client, jobs[0][1], jobs[1][1], n, seconds)
                quiet = latency_run(client, jobs[0][1], loaded_n, seconds, 0)
                loaded = latency_run(client, jobs[0][1], loaded_n, seconds, os.cpu_count() or 1)
        finally:
            for proc, _ in jobs:
                proc.stop()
            daemon.stop()
    print(json.dumps({"memory": memory, "quiet": quiet, "loaded": loaded}))
    body = report(memory, quiet, loaded, n, seconds)
    print(body)
    write_section("capture-memory", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
