"""Record execution samples of a known job on this machine's accelerator, for the ledger's
tests: a bf16 matmul chain stepped at a paced rate under `xmon.step()`, with a small second
program three times a step; each sample is the XSpace the agent would send (xmon.agent.sampler)
beside the job's own truth.

    python benchmarks/record_gpu_sample.py OUT_DIR [--samples 2] [--duration 0.5]

Writes OUT_DIR/sample-N.xspace and OUT_DIR/samples.json (the truth, the step begins, and the
module ids the agent's catalogue holds for each program). RECORD_N sets the matrices' size
(4096; smaller to try it on a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import xmon
from xmon.agent.capabilities import Capabilities
from xmon.agent.internals import probe
from xmon.agent.sampler import ExecutionSampler, LedgerConfig
from xmon.agent.steps import StepTimer

N, CHAIN, RATE, SMALL_PER_STEP = int(os.environ.get("RECORD_N", 4096)), 8, 20.0, 3


@jax.jit
def big(a: jax.Array, b: jax.Array) -> jax.Array:
    for _ in range(CHAIN):
        a = jnp.tanh(a @ b)
    return a


@jax.jit
def small(a: jax.Array) -> jax.Array:
    return jnp.sin(a).sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--duration", type=float, default=0.5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # The agent attached (no daemon) before the compiles, so its catalogue holds their ids.
    agent = xmon.attach(job_name="record", socket_path=args.out / "absent.sock", ledger=False)
    a = jnp.full((N, N), 0.01, jnp.bfloat16)
    b = jnp.full((N, N), 0.01, jnp.bfloat16)
    big(a, b).block_until_ready()
    small(a).block_until_ready()
    timer, stop = StepTimer(), threading.Event()
    counts = {"steps": 0, "blocked": 0.0}

    def loop() -> None:
        start = time.monotonic()
        while not stop.is_set():
            with timer.step():
                t = time.perf_counter()
                big(a, b).block_until_ready()
                for _ in range(SMALL_PER_STEP):
                    small(a).block_until_ready()
                counts["blocked"] += time.perf_counter() - t
            counts["steps"] += 1
            time.sleep(max(0.0, start + counts["steps"] / RATE - time.monotonic()))

    sent: list = []
    config = LedgerConfig(duration=args.duration, interval=args.duration + 1, first_delay=0)
    sampler = ExecutionSampler(config, lambda s: sent.append(s) or True, lambda: True,
                               step_begins=lambda: timer.begin_times,
                               capabilities=Capabilities(probe()))  # fmt: skip
    worker = threading.Thread(target=loop)
    started = time.monotonic()
    worker.start()
    time.sleep(1.0)
    for _ in range(args.samples):
        sampler.sample_once()
        time.sleep(0.5)
    stop.set()
    worker.join()
    elapsed = time.monotonic() - started
    agent.hlo.drain()  # the module ids the agent read from each executable
    catalogue = {name: list(getattr(agent.compiles.program_by_name(name), "program_ids", ()))
                 for name in ("jit_big", "jit_small")}  # fmt: skip
    meta = {"backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
            "jax": jax.__version__, "rate": counts["steps"] / elapsed,
            "busy": counts["blocked"] / elapsed, "small_per_step": SMALL_PER_STEP,
            "flops_per_big": CHAIN * 2 * N**3, "catalogue_ids": catalogue,
            "samples": []}  # fmt: skip
    for index, sample in enumerate(sent):
        (args.out / f"sample-{index}.xspace").write_bytes(sample.xspace)
        meta["samples"].append({"duration": sample.duration_seconds,
                                "step_begins": list(sample.step_begin_seconds)})  # fmt: skip
    (args.out / "samples.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps({k: v for k, v in meta.items() if k != "samples"}),
          [len(s.xspace) for s in sent])  # fmt: skip


if __name__ == "__main__":
    main()
