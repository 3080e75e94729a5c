"""Healthy twins of the pathology jobs: each is its pathology's job with the problem fixed the
way a user fixes it, and nothing a detector should flag. A twin's step does a real step's work
(tens of milliseconds on the device): a step of microseconds is dispatch-bound, which
``host_bound`` rightly says of any job.

- the tokenising loader, prefetched on a thread (as grain or tf.data do) beside a step that
  computes longer than the loader takes;
- the sleeping loader (waiting on I/O), prefetched the same way;
- params kept every step, replaced by one exponential moving average of them (bounded);
- a changing sequence length, padded to one bucket: no recompile after the first compile.

Each runs until its stop file appears (or ``JOB_SECONDS`` pass).
"""

from __future__ import annotations

from healthy_jobs import HEADER
from pathology_jobs import ADAM_97_LEAVES, TOKENISING_LOADER

# Batches made on a thread into a queue of two, as input pipelines prefetch.
_PREFETCH = r"""
import queue, threading

def prefetched(load):
    batches = queue.Queue(maxsize=2)

    def fill():
        step = 0
        while running():
            batches.put(load(step))
            step += 1

    threading.Thread(target=fill, daemon=True).start()
    while True:
        yield batches.get()
"""

# A three-layer MLP step over a 64-row batch: about 2 GFLOP with its gradient.
_MLP_STEP = r"""
key = jax.random.key(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {"w1": jax.random.normal(k1, (256, 2048)) / 16,
          "w2": jax.random.normal(k2, (2048, 2048)) / 45,
          "w3": jax.random.normal(k3, (2048, 256)) / 45}

def loss(p, batch):
    h = jnp.tanh(batch @ p["w1"])
    h = jnp.tanh(h @ p["w2"])
    return jnp.mean((h @ p["w3"] - batch) ** 2)

@jax.jit
def train_step(p, batch):
    value, grads = jax.value_and_grad(loss)(p, batch)
    return jax.tree.map(lambda a, g: a - 0.01 * g, p, grads), value
"""

_TRAIN = r"""
for batch in prefetched(load_batch):
    if not running():
        break
    with xmon.step():
        params, value = train_step(params, batch)
        value.block_until_ready()
"""

TOKENISING_PREFETCHED = HEADER + TOKENISING_LOADER + _PREFETCH + _MLP_STEP + _TRAIN

SLEEPING_PREFETCHED = (
    HEADER
    + r"""
import numpy as np

def load_batch(step):
    time.sleep(0.05)  # the input pipeline waits on storage
    return np.full((64, 256), (step % 7) / 7, np.float32)
"""
    + _PREFETCH
    + _MLP_STEP
    + _TRAIN
)

# The params-leak job's 64 leaves of 128x128, used as a 64-layer network over a batch, with
# one moving average of them kept instead of a copy per step.
PARAMS_AVERAGED = (
    HEADER
    + r"""
params = {f"w{i:02d}": jnp.full((128, 128), 0.01 * i, jnp.float32) + jnp.eye(128)
          for i in range(64)}
batch = jnp.ones((512, 128), jnp.float32) / 128

def loss(p, x):
    for name in sorted(p):
        x = jnp.tanh(x @ p[name])
    return jnp.mean(x ** 2)

@jax.jit
def train_step(params, x):
    grads = jax.grad(loss)(params, x)
    return jax.tree.map(lambda w, g: w - 1e-3 * g, params, grads)

@jax.jit
def averaged(average, params):
    return jax.tree.map(lambda a, w: 0.99 * a + 0.01 * w, average, params)

average = params
while running():
    with xmon.step():
        params = train_step(params, batch)
        average = averaged(average, params)
        jax.block_until_ready(average)
"""
)

# The late-batch-shape job's step (pathology_jobs.ADAM_97_LEAVES), wider, with its sequences
# padded to one length.
BATCH_PADDED = (
    HEADER
    + "WIDTH, PADDED = 256, 64\n"
    + ADAM_97_LEAVES
    + r"""
step = 0
while running():
    length = 32 + step % 32  # the loader's lengths change as before
    with xmon.step():
        tokens = jnp.arange(8 * length, dtype=jnp.int32).reshape(8, length)
        tokens = jnp.pad(tokens, ((0, 0), (0, PADDED - length)))  # one bucket
        params, opt_state = train_step(params, opt_state, tokens)
        jax.block_until_ready(params)
    step += 1
"""
)

TWINS = {
    "tokenising_prefetched": TOKENISING_PREFETCHED,
    "sleeping_prefetched": SLEEPING_PREFETCHED,
    "params_averaged": PARAMS_AVERAGED,
    "batch_padded": BATCH_PADDED,
}
