"""Real processes for the profiling tests: a daemon with profiling settings, a stepping JAX job,
the xmon CLI, a TensorBoard server, and small tmpfs mounts for full or read-only disks."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.procs import (
    REPO,
    Daemon,
    Proc,
    base_env,
    free_port,
    json_written,
    spawn,
    start_daemon,
    start_job,
    wait_for,
)

# Steps a jitted train_step until the file JOB_STOP appears; writes its pid and the FLOPs of
# train_step to JOB_OUT. SLOW_STEP_AT=N makes step N sleep SLOW_STEP_SECONDS.
STEPPING_JOB = r"""
import json, os, pathlib, time
import jax, jax.numpy as jnp
import xmon

out = pathlib.Path(os.environ["JOB_OUT"])
stop = pathlib.Path(os.environ["JOB_STOP"])
pause = float(os.environ.get("STEP_SLEEP", "0.01"))
slow_at = int(os.environ.get("SLOW_STEP_AT", "-1"))
slow_for = float(os.environ.get("SLOW_STEP_SECONDS", "0"))

@jax.jit
def train_step(a, b):
    return jnp.tanh(a @ b)

a = jnp.ones((128, 128)); b = jnp.ones((128, 128))
with xmon.step():
    r = train_step(a, b)
cost = train_step.lower(a, b).compile().cost_analysis()
out.write_text(json.dumps({"pid": os.getpid(), "flops": cost["flops"],
                           "bytes": cost["bytes accessed"]}))
step = 0
while not stop.exists():
    with xmon.step():
        r = train_step(a, b).block_until_ready()
        if step == slow_at:
            time.sleep(slow_for)
    step += 1
    time.sleep(pause)
print(f"RESULT steps={step} ok={bool(jnp.isfinite(r).all())}", flush=True)
"""


@dataclass
class Job:
    proc: Proc
    workdir: Path
    name: str
    pid: int
    flops: float
    bytes_accessed: float

    def stop(self) -> str:
        (self.workdir / f"{self.name}.stop").touch()
        code = self.proc.popen.wait(60)
        assert code == 0, self.proc.log()
        return self.proc.log()


def profiling_daemon(workdir: Path, **settings: Any) -> Daemon:
    """A daemon whose [profiling] table is ``settings`` (defaults for tests: triggers off,
    scalars at every snapshot)."""
    table = {"triggers": False, "tensorboard_interval_seconds": 0, **settings}
    return start_daemon(workdir, env={"XMON_PROFILING": json.dumps(table)})


def run_stepping_job(workdir: Path, daemon: Daemon, name: str, **env: str) -> Job:
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{name}.json"
    proc = start_job(workdir, daemon.socket_path, STEPPING_JOB, name, JOB_OUT=str(out),
                     JOB_STOP=str(workdir / f"{name}.stop"), **env)  # fmt: skip

    def started() -> Any:
        if not proc.alive():
            raise AssertionError(f"job {name} exited:\n{proc.log()}")
        return json_written(out)

    info = wait_for(started, 120, f"job {name} to start")
    return Job(proc, workdir, name, info["pid"], info["flops"], info["bytes"])


def xmon_cli(daemon: Daemon, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = base_env(XMON_SOCKET=str(daemon.socket_path))
    return subprocess.run([sys.executable, "-m", "xmon", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)  # fmt: skip


def get_json(url: str, timeout: float = 10) -> Any:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


@contextlib.contextmanager
def tensorboard_server(logdir: Path, workdir: Path) -> Iterator[str]:
    """A real TensorBoard (with the profile plugin) serving ``logdir``; yields its URL."""
    binary = Path(sys.executable).parent / "tensorboard"
    if not binary.exists():
        binary = Path(shutil.which("tensorboard") or "tensorboard")
    port = free_port()
    cmd = [str(binary), "--logdir", str(logdir), "--port", str(port), "--host", "127.0.0.1",
           "--reload_interval", "1"]  # fmt: skip
    proc = spawn(cmd, workdir / "tensorboard.log", dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if not proc.alive():
                raise AssertionError(f"tensorboard exited:\n{proc.log()}")
            return get_json(f"{url}/data/runs", timeout=2) is not None

        wait_for(up, 90, "tensorboard to serve")
        yield url
    finally:
        proc.stop()


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """A small tmpfs at ``path`` (root only): a disk that fills up, or one nobody can write."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
