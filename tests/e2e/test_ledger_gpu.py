"""The execution ledger on a real GPU (skipped without one): a job on GPU 0 steps a known bf16
matmul chain at a paced rate, marked with `xmon.step()`, under a real daemon; executions per
second, FLOPs per step, HFU and the device busy ratio on /metrics are compared with what the
job itself measured without xmon."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.procs import start_daemon, start_job, wait_for

pytestmark = pytest.mark.gpu

N, CHAIN, RATE = 4096, 8, 20.0  # 8 dots of 4096^3 per step, 20 steps a second
TRUE_FLOPS_PER_STEP = CHAIN * 2 * N**3

JOB = r"""
import json, os, pathlib, time
import jax, jax.numpy as jnp, xmon

out, stop = pathlib.Path(os.environ["JOB_OUT"]), pathlib.Path(os.environ["JOB_STOP"])
if jax.default_backend() != "gpu":
    out.write_text(json.dumps({"skip": f"jax backend is {jax.default_backend()}"}))
    raise SystemExit
n, chain, rate = int(os.environ["N"]), int(os.environ["CHAIN"]), float(os.environ["RATE"])

@jax.jit
def step(a, b):
    for _ in range(chain):
        a = jnp.tanh(a @ b)
    return a

a = jnp.full((n, n), 0.01, jnp.bfloat16)
b = jnp.full((n, n), 0.01, jnp.bfloat16)
step(a, b).block_until_ready()
out.write_text(json.dumps({"pid": os.getpid()}))
start = time.monotonic()
done, blocked = 0, 0.0  # steps, and seconds spent waiting for their results
while not stop.exists():
    with xmon.step():
        t = time.perf_counter()
        step(a, b).block_until_ready()
        blocked += time.perf_counter() - t
    done += 1
    time.sleep(max(0.0, start + done / rate - time.monotonic()))
elapsed = time.monotonic() - start
out.write_text(json.dumps({"pid": os.getpid(), "steps": done, "elapsed": elapsed,
                           "busy": blocked / elapsed}))
"""


def series(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_ledger_counts_what_ran_on_the_gpu(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    out, stop = tmp_path / "job.json", tmp_path / "job.stop"
    job = start_job(tmp_path, daemon.socket_path, JOB, "gpu-ledger", JOB_OUT=str(out),
                    JOB_STOP=str(stop), N=str(N), CHAIN=str(CHAIN), RATE=str(RATE),
                    JAX_PLATFORMS="", XMON_LEDGER_INTERVAL="3")  # fmt: skip
    try:
        first = wait_for(lambda: out.exists() and json.loads(out.read_text()), 300, "the job")
        if "skip" in first:
            pytest.skip(first["skip"])

        def sampled() -> str | None:
            text = daemon.scrape()
            taken = series(text, "xmon_agent_ledger_samples_total", job_name="gpu-ledger")
            return text if taken and taken >= 4 else None

        text = wait_for(sampled, 120, "four execution samples", interval=1.0)
        stop.touch()
        assert job.popen.wait(60) == 0, job.log()
        truth = json.loads(out.read_text())
        print(f"truth {truth}")
        for line in text.splitlines():
            if re.match(r"xmon_(job_(flops_per_step|steps_per_second|hardware_flops|device_busy"
                        r"|program_executions)|agent_(capability|ledger))", line):  # fmt: skip
                print(line)
        rate = truth["steps"] / truth["elapsed"]
        executions = series(text, "xmon_job_program_executions_per_second", program="jit_step")
        assert executions == pytest.approx(rate, rel=0.05), (executions, rate)
        flops = series(text, "xmon_job_flops_per_step", job_name="gpu-ledger")
        assert flops == pytest.approx(TRUE_FLOPS_PER_STEP, rel=0.02), flops
        # The job cannot time its kernels without a profiler: its busy share lies between the
        # step's FLOPs at the device's peak (physics) and the job's time blocked on results.
        busy = series(text, "xmon_job_device_busy_ratio", job_name="gpu-ledger")
        peak = series(text, "xmon_job_peak_flops_per_second", job_name="gpu-ledger")
        assert peak is not None, "no peak for this GPU"
        floor = TRUE_FLOPS_PER_STEP / peak * rate
        assert busy is not None and floor <= busy <= truth["busy"], (floor, busy, truth["busy"])
        assert series(text, "xmon_job_ledger_parse_errors_total", job_name="gpu-ledger") == 0
        assert 'capability_available{capability="ledger",job_name="gpu-ledger"' in text
        assert not re.search(r"xmon_agent_capability_available\{.*\} 0\.0", text), text
    finally:
        stop.touch()
        job.stop()
        daemon.stop()
