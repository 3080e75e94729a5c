"""A job that knows where its own wall time went (tests/fidelity/test_goodput.py).

Usage: goodput_job.py TRUTH_JSON CHECKPOINT_DIR MARKED(1|0)

Five seconds of start-up before it imports jax, an AOT warm-up compile of its train step,
steps of one large matmul (tens of ms of device work) and 20 ms of host work (a compile
inside the first), a real Orbax checkpoint saved every 25 steps, a 10 s host stall, then an
idle tail until the test touches ``TRUTH_JSON.stop``. Every span is timed on the job's own
clock (time.time()) and written to ``TRUTH_JSON`` once the last step ended; the process's
start is the kernel's.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import psutil

truth_path, checkpoints, marked = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
truth: dict[str, float] = {"process_start": psutil.Process().create_time(), "compile": 0.0,
                           "compile_in_steps": 0.0, "save": 0.0, "stall": 0.0,
                           "device_seconds": 0.0, "host_sleep": 0.0}  # fmt: skip

time.sleep(5.0)  # start-up: reading a config, waiting for a dataset to mount

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

import xmon  # noqa: E402

STEPS, SAVE_EVERY, STALL_AT, HOST_SECONDS = 100, 25, 60, 0.02


def timed(key: str, fn):  # type: ignore[no-untyped-def]
    started = time.time()
    out = fn()
    truth[key] += time.time() - started
    return out


def train_step(w, x):  # type: ignore[no-untyped-def]
    # One matmul (and its tanh): the device's busy time is the op's, and the job's own timing
    # of the call holds it with little else (a chain of small ops has gaps the device idles in)
    return w, jnp.tanh(x @ w)


def metrics(x):  # type: ignore[no-untyped-def]
    return jnp.mean(x), jnp.std(x)


rng = np.random.default_rng(0)
w_host = (rng.standard_normal((1536, 1536)) / 40).astype(np.float32)
x_host = rng.standard_normal((1536, 1536)).astype(np.float32)
truth["first_compile"] = time.time()
compiled = timed("compile", lambda: jax.jit(train_step).lower(w_host, x_host).compile())
w, x = jax.device_put(w_host), jax.device_put(x_host)
checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
step = xmon.step if marked else contextlib.nullcontext

for i in range(STEPS):
    if i == STALL_AT:
        timed("stall", lambda: time.sleep(10.0))  # a loader waiting on a stuck read
    if i and i % SAVE_EVERY == 0:
        saved = time.time()
        checkpointer.save(
            os.path.join(checkpoints, f"step_{i}"), args=ocp.args.StandardSave({"w": w})
        )
        truth["save"] += time.time() - saved
    begun = time.time()
    with step():
        if i == 0:
            truth["first_step"] = begun
            compile_started = time.time()
            summary = jax.jit(metrics).lower(x).compile()  # compiled inside the first step
            truth["compile_in_steps"] += time.time() - compile_started
        device_started = time.time()
        w, x = compiled(w, x)
        x.block_until_ready()
        truth["device_seconds"] += time.time() - device_started
        slept = time.time()
        time.sleep(HOST_SECONDS)  # host work in the step: logging, the next batch
        truth["host_sleep"] += time.time() - slept
    truth["last_end"] = time.time()
truth["compile"] += truth["compile_in_steps"]
jax.block_until_ready(summary(x))

with open(truth_path + ".tmp", "w") as out:
    json.dump(truth, out)
os.replace(truth_path + ".tmp", truth_path)
while not os.path.exists(truth_path + ".stop"):  # idle: the loop is over, the process lives
    time.sleep(0.1)
