"""JAX jobs of the memory pathologies: running out of memory, and a leak.

Each runs until its stop file appears (or 180 s pass), like the jobs of pathology_jobs.
"""

from __future__ import annotations

from pathology_jobs import HEADER

# The largest array, sharded over the 4 devices (2 MiB each), and a smaller one on one device.
_HELD = r"""
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices(), ("x",))
weights = jax.device_put(jnp.ones((2048, 1024), jnp.float32), NamedSharding(mesh, P("x")))
bias = jnp.zeros((512, 512), jnp.float32)

@jax.jit
def train_step(w, b):
    return b + w[:512, :512].sum()

# Its output needs 16 TiB: XLA refuses the allocation (RESOURCE_EXHAUSTED).
@jax.jit
def expand(v):
    return jnp.broadcast_to(v, (1 << 30, v.shape[0])) * 2.0

for _ in range(20):
    with xmon.step():
        bias = train_step(weights, bias)
        bias.block_until_ready()
    time.sleep(0.05)
"""

# The job catches the error (outside the step) and goes on stepping.
OOM_CAUGHT = (
    HEADER
    + _HELD
    + r"""
try:
    with xmon.step():
        expand(jnp.ones((4096,), jnp.float32)).block_until_ready()
except Exception as exc:
    print("caught:", type(exc).__name__, str(exc)[:80], flush=True)
while running():
    with xmon.step():
        bias = train_step(weights, bias)
        bias.block_until_ready()
    time.sleep(0.05)
"""
)

# Nobody catches it, outside any step: the job dies of it, as it would without xmon.
OOM_UNCAUGHT = (
    HEADER
    + _HELD
    + r"""
expand(jnp.ones((4096,), jnp.float32)).block_until_ready()
"""
)

# Every step's output is kept on device in a list: LEAK_BYTES more per step. The job writes
# its own truth (steps and the time they took) for the test to check the fitted slope.
LEAK_BYTES = 64 * 1024 * 4
LEAK = (
    HEADER
    + r"""
import json
TRUTH = os.environ["JOB_TRUTH"]

@jax.jit
def train_step(x):
    return x * 1.0001 + 1.0

x = jnp.ones((64, 1024), jnp.float32)
history = []
steps, started = 0, time.monotonic()
while running():
    with xmon.step():
        y = train_step(x)
        y.block_until_ready()
        history.append(y)
    steps += 1
    if steps % 20 == 0:
        with open(TRUTH + ".tmp", "w") as f:
            json.dump({"steps": steps, "seconds": time.monotonic() - started,
                       "bytes_per_step": y.nbytes}, f)
        os.replace(TRUTH + ".tmp", TRUTH)
    time.sleep(0.05)
"""
)

# A copy of the params kept every step (64 leaves, 4 MiB): many arrays, growing fast, as the
# job of a user who keeps a history of params for an EMA or a debug dump.
PARAMS_LEAK = (
    HEADER
    + r"""
import json
TRUTH = os.environ["JOB_TRUTH"]

params = {f"w{i}": jnp.full((128, 128), 0.01 * i, jnp.float32) for i in range(64)}

@jax.jit
def train_step(params):
    return jax.tree.map(lambda w: w * 0.999 + 0.001, params)

kept = []
steps, started = 0, time.monotonic()
while running():
    with xmon.step():
        params = train_step(params)
        jax.block_until_ready(params)
        kept.append(jax.tree.map(lambda w: w + 0.0, params))
    steps += 1
    if steps % 20 == 0:
        with open(TRUTH + ".tmp", "w") as f:
            json.dump({"steps": steps, "seconds": time.monotonic() - started,
                       "bytes_per_step": sum(w.nbytes for w in params.values())}, f)
        os.replace(TRUTH + ".tmp", TRUTH)
    time.sleep(0.15)
"""
)
