"""`xmon capture` of a real JAX job on an NVIDIA GPU: the trace must show the device's ops
(skipped without a GPU; run on the GPU machine)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from support.procs import base_env, spawn, wait_for
from support.profiling_procs import profiling_daemon, xmon_cli

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU"),
]

GPU_JOB = r"""
import os, pathlib, jax, jax.numpy as jnp, xmon
assert jax.default_backend() == "gpu", jax.default_backend()
a = jnp.ones((4096, 4096), jnp.bfloat16)
train_step = jax.jit(lambda a: jnp.tanh(a @ a))
pathlib.Path(os.environ["JOB_OUT"]).write_text(str(os.getpid()))
stop = pathlib.Path(os.environ["JOB_STOP"])
while not stop.exists():
    with xmon.step():
        train_step(a).block_until_ready()
"""


def test_gpu_trace_shows_device_ops(tmp_path: Path) -> None:
    daemon = profiling_daemon(tmp_path / "daemon")
    script, out, stop = tmp_path / "gpu_job.py", tmp_path / "pid", tmp_path / "stop"
    script.write_text(GPU_JOB)
    env = base_env(XMON_SOCKET=str(daemon.socket_path), JOB_OUT=str(out), JOB_STOP=str(stop))
    env.pop("JAX_PLATFORMS", None)
    cmd = [sys.executable, "-m", "xmon", "run", "--job-name", "gpujob", "--", sys.executable,
           str(script)]  # fmt: skip
    job = spawn(cmd, tmp_path / "gpujob.log", env)
    try:
        wait_for(lambda: out.exists() or not job.alive(), 300, "the GPU job to start")
        assert job.alive(), job.log()
        result = xmon_cli(daemon, "capture", "--job", "gpujob", "--duration", "1s", "--json")
        assert result.returncode == 0, result.stderr
        [xplane] = json.loads(result.stdout)["paths"]
        memory = xmon_cli(daemon, "capture", "--job", "gpujob", "--memory")
        assert memory.returncode == 0, memory.stderr
    finally:
        stop.touch()
        job.popen.wait(120)
        daemon.stop()
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "trace_viewer", {})
    events = json.loads(data)["traceEvents"]
    gpu_pids = {e["pid"] for e in events if e.get("ph") == "M"
                and "/device:GPU" in str(e.get("args", {}).get("name", ""))}  # fmt: skip
    device_ops = [e for e in events if e.get("pid") in gpu_pids and e.get("ph") == "X"]
    assert gpu_pids and device_ops, "no device events in the GPU trace"
