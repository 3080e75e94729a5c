"""Real JAX jobs that know their own device memory and step time, for the agent's fidelity.

Run as a script, one job per process (4 CPU devices):

    python tests/fidelity/memory_jobs.py CASE OUT_JSON [--markers] [--seconds S]

CASE is ``data_parallel`` (a batch sharded over the devices, replicated parameters, the
batch's shards read back the way data-parallel code logs them, then at rest), ``donated``
(a training loop whose state is donated to every step) or ``nnx`` (Flax NNX: a module and its
optimizer updated in place by an ``nnx.jit`` step). Each job computes its truth without
xmon: the bytes of every array it holds, per device, from the arrays' own shapes and shard
shapes (each buffer once). It attaches the agent (``XMON_SOCKET``), records every memory
reading the agent publishes, and writes them with the truth to OUT_JSON. Then it stays at rest
until the file OUT_JSON.stop exists, so a daemon can be scraped.

``steps`` runs marked steps of known length and writes the job's own clock: the first step's
start to the last step's end, and the count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEVICES = 4
BATCH = (2048, 512)  # float32: 4 MiB, a quarter per device
PARAMS = (512, 512)  # float32: 1 MiB on every device
PERIOD = 0.2  # agent report period: many readings in a short job


def _bytes_per_device(arrays: list[Any]) -> dict[int, int]:
    """The job's own count: each array's shard bytes on each of its devices (no aliasing
    among them: every array here owns its buffers)."""
    import math

    totals = {d: 0 for d in range(DEVICES)}
    for array in arrays:
        shard_shape = array.sharding.shard_shape(array.shape)
        nbytes = math.prod(shard_shape) * array.dtype.itemsize
        for device in array.sharding.device_set:
            totals[int(device.id)] += nbytes
    return totals


class Recorder:
    """Every memory reading the agent publishes, with the time its snapshot was taken."""

    def __init__(self, agent: Any) -> None:
        self.readings: list[tuple[float, dict[int, int]]] = []
        clock_offset = time.monotonic() - time.perf_counter()  # the agent's clock → monotonic
        original = agent._memory_samples

        def recorded() -> Any:
            samples = original()
            published = {
                int(s.device_id): int(s.live_array_bytes)
                for s in samples
                if s.HasField("live_array_bytes")
            }
            live = getattr(agent, "live_memory", None)  # None: an agent that reads every tick
            taken_at = time.monotonic() if live is None else live.last_at
            if published and taken_at is not None:
                self.readings.append((taken_at + (0 if live is None else clock_offset), published))
            return samples

        agent._memory_samples = recorded


def _mesh() -> tuple[Any, Any, Any]:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.local_devices()), ("data",))
    return mesh, NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())


def _train(step: Callable[[], object], seconds: float, markers: bool) -> int:
    """Steps for ``seconds``, each in ``xmon.step()`` with ``markers``, else followed by a
    little host work (an input pipeline: the job at rest between steps); the steps run."""
    import xmon

    deadline = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < deadline:
        if markers:
            with xmon.step():
                step()
        else:
            step()
            time.sleep(0.002)
        steps += 1
    return steps


def data_parallel(seconds: float, markers: bool) -> dict[str, Any]:
    import jax
    import numpy as np

    _, sharded, replicated = _mesh()
    batch = jax.device_put(np.ones(BATCH, np.float32), sharded)
    params = jax.device_put(np.full(PARAMS, 0.5, np.float32), replicated)
    # Data-parallel code reads its shards (logging, per-host input checks): shard.data is a
    # live single-device array over the same buffer as the batch.
    shard_sums = [float(shard.data[0, 0]) for shard in batch.addressable_shards]
    truth = _bytes_per_device([batch, params])
    truth_since = time.monotonic()
    time.sleep(seconds)
    return {
        "truth": truth,
        "truth_since": truth_since,
        "rest_truth": truth,
        "check": sum(shard_sums),
        "keep": [batch, params],
    }


def donated(seconds: float, markers: bool) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    _, sharded, replicated = _mesh()
    batch = jax.device_put(np.ones(BATCH, np.float32), sharded)
    state = {
        "w": jax.device_put(np.full(PARAMS, 0.01, np.float32), replicated),
        "m": jax.device_put(np.zeros(PARAMS, np.float32), replicated),
    }

    def train_step(state: dict[str, Any]) -> dict[str, Any]:
        # Replicated work, no collective: XLA's CPU all-reduce can stall on a 2-core host.
        h = jnp.tanh(state["w"] @ state["w"])
        m = 0.9 * state["m"] + h
        return {"w": state["w"] - 1e-3 * m, "m": m}

    step = jax.jit(train_step, donate_argnums=0)
    state = step(state)
    jax.block_until_ready(state)
    truth = _bytes_per_device([batch, *state.values()])
    truth_since = time.monotonic()

    def one_step() -> None:
        nonlocal state
        state = step(state)

    steps = _train(one_step, seconds, markers)
    jax.block_until_ready(state)
    rest_truth = _bytes_per_device([batch, *state.values()])
    return {
        "truth": truth,
        "truth_since": truth_since,
        "rest_truth": rest_truth,
        "steps": steps,
        "keep": [batch, state],
    }


def steps(seconds: float, markers: bool) -> dict[str, Any]:
    """Marked steps of uneven length; the job's own clock from first start to last end."""
    import jax
    import jax.numpy as jnp

    import xmon

    f = jax.jit(lambda x: jnp.tanh(x @ x))
    x = jnp.ones((128, 128))
    f(x).block_until_ready()
    count = 0
    first_start = last_end = time.perf_counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        with xmon.step(flops=1e9):
            f(x).block_until_ready()
            time.sleep(0.02 + 0.03 * (count % 3))  # 20, 50, 80 ms: uneven on purpose
        last_end = time.perf_counter()
        if count == 0:
            first_start = start
        count += 1
    return {"steps_total": count, "step_seconds_total": last_end - first_start}


def nnx_training(seconds: float, markers: bool) -> dict[str, Any]:
    """Flax NNX as its docs train: an ``nnx.Module`` and an ``nnx.Optimizer`` updated in place
    by an ``nnx.jit`` step. The wrapper splits the objects' state, calls its jitted function and
    writes the new state back into the objects: until it has, old and new state are both
    alive, though no jitted call is running."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx

    _, _, replicated = _mesh()

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.first = nnx.Linear(PARAMS[0], PARAMS[1], rngs=rngs)
            self.second = nnx.Linear(PARAMS[1], PARAMS[1], rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.second(jnp.tanh(self.first(x)))

    model = Model(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-4), wrt=nnx.Param)
    # Everything replicated: each device computes the whole step, with no collective (XLA's
    # CPU all-reduce can stall on a 2-core host with 4 devices).
    nnx.update((model, optimizer), jax.device_put(nnx.state((model, optimizer)), replicated))
    batch = jax.device_put(np.ones((BATCH[0] // 4, BATCH[1]), np.float32), replicated)

    @nnx.jit
    def train_step(model: Model, optimizer: Any, x: Any) -> Any:
        def loss(model: Model) -> Any:
            return jnp.mean(model(x) ** 2)

        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return value

    def held() -> dict[int, int]:
        leaves = jax.tree.leaves(nnx.state((model, optimizer)))
        arrays = [leaf for leaf in leaves if isinstance(leaf, jax.Array)]
        return _bytes_per_device([batch, *arrays])

    train_step(model, optimizer, batch).block_until_ready()
    truth = held()
    truth_since = time.monotonic()
    steps = _train(lambda: train_step(model, optimizer, batch), seconds, markers)
    jax.block_until_ready(nnx.state((model, optimizer)))
    return {
        "truth": truth,
        "truth_since": truth_since,
        "rest_truth": held(),
        "steps": steps,
        "keep": [batch, model, optimizer],
    }


CASES = {
    "data_parallel": data_parallel,
    "donated": donated,
    "nnx": nnx_training,
    "steps": steps,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("out", type=Path)
    parser.add_argument("--markers", action="store_true")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    import xmon

    jax.local_devices()  # the backend exists before the agent looks for devices
    agent = xmon.attach(job_name=f"fidelity-{args.case}", period=PERIOD)
    recorder = Recorder(agent)
    result = CASES[args.case](args.seconds, args.markers)
    kept = result.pop("keep", None)  # the job's arrays stay alive while it rests
    training_readings = len(recorder.readings)
    rest_since = time.monotonic()
    time.sleep(3 * PERIOD + 0.5)  # at rest: the agent's next readings see it so
    result.update(
        readings=[[t, {str(k): v for k, v in r.items()}] for t, r in recorder.readings],
        training_readings=training_readings,
        rest_since=rest_since,
        truth={str(k): v for k, v in result.get("truth", {}).items()},
        rest_truth={str(k): v for k, v in result.get("rest_truth", {}).items()},
    )
    args.out.write_text(json.dumps(result))
    stop = args.out.with_name(args.out.name + ".stop")
    while not stop.exists():
        time.sleep(0.05)
    del kept
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
