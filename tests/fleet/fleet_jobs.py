"""A real multi-process JAX training job for the fleet tests: data-parallel over
``jax.distributed`` processes on CPU (gloo collectives), one device each, with faults injected
through a JSON file the processes read twice a second:

* ``{"slow": {"2": 0.05}}``: process 2 spends 50 ms in its host loop every step;
* ``{"block": 3}``: process 3 deadlocks on a lock inside its step (as a stuck data loader
  would), while the others go on into the step's all-reduce and wait there for it.
"""

TRAIN = r"""
import json
import os
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import xmon

jax.config.update("jax_cpu_collectives_implementation", "gloo")
index, count = int(os.environ["FLEET_PROCESS"]), int(os.environ["FLEET_COUNT"])
jax.distributed.initialize(os.environ["FLEET_COORDINATOR"], num_processes=count,
                           process_id=index)
faults = Path(os.environ["FLEET_FAULTS"])

mesh = Mesh(np.array(jax.devices()), ("data",))
batch, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
rng = np.random.default_rng(index)
x = jax.make_array_from_process_local_data(batch, rng.standard_normal((128, 256), np.float32))
y = jax.make_array_from_process_local_data(batch, rng.standard_normal((128, 1), np.float32))
params = jax.device_put(
    (np.full((256, 256), 0.01, np.float32), np.full((256, 1), 0.01, np.float32)), replicated
)


@jax.jit
def train_step(params, x, y):
    def loss(p):
        hidden = jnp.tanh(jnp.tanh(x @ p[0]) @ p[0])
        return jnp.mean((hidden @ p[1] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)  # the mean over the batch: an all-reduce
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value


deadlock = threading.Lock()
fault, read_at = {}, 0.0
while True:
    if time.monotonic() - read_at > 0.5:
        read_at = time.monotonic()
        try:
            fault = json.loads(faults.read_text())
        except (OSError, ValueError):
            fault = {}
    with xmon.step():
        delay = fault.get("slow", {}).get(str(index))
        if delay:
            time.sleep(delay)
        if fault.get("block") == index:
            deadlock.acquire()
            deadlock.acquire()
        params, value = train_step(params, x, y)
        float(value)
"""
