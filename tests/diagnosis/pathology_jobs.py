"""The pathology suite's JAX jobs: each runs until its stop file appears (or 180 s pass).

CPU note: XLA's CPU collectives can stall on a small host with several virtual devices, so
no job reduces across devices.
"""

from __future__ import annotations

HEADER = r"""
import functools, os, threading, time
import jax, jax.numpy as jnp
import xmon

STOP = os.environ["JOB_STOP"]
DEADLINE = time.monotonic() + 180


def running():
    return not os.path.exists(STOP) and time.monotonic() < DEADLINE
"""

# The input grows by one element each step: a compile per step, "shape" the cause.
GROWING_SHAPE = (
    HEADER
    + r"""
@jax.jit
def train_step(x):
    return (x * 2.0).sum()

n = 8
while running():
    with xmon.step():
        train_step(jnp.ones((n,))).block_until_ready()
    n += 1
    time.sleep(0.05)
"""
)

# Params and an Adam state of 97 leaves (8 layers of WIDTH), and a step that trains them on a
# batch of tokens, its last argument.
ADAM_97_LEAVES = r"""
def layer(i):
    return {"w": jnp.full((WIDTH, WIDTH), 0.01 * i), "b": jnp.zeros((WIDTH,)),
            "scale": jnp.ones((WIDTH,)), "bias": jnp.zeros((WIDTH,))}

params = {f"layer{i}": layer(i) for i in range(8)}
opt_state = (jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params),
             jnp.zeros((), jnp.int32))

@jax.jit
def train_step(params, opt_state, tokens):
    def loss(p):
        h = jax.nn.one_hot(tokens % WIDTH, WIDTH)
        for name in sorted(p):
            h = jnp.tanh(h @ p[name]["w"] + p[name]["b"]) * p[name]["scale"] + p[name]["bias"]
        return (h ** 2).mean()
    grads = jax.grad(loss)(params)
    mu, nu, count = opt_state
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, mu, grads)
    nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, nu, grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
    return params, (mu, nu, count + 1)
"""

# A step written as users write one (ADAM_97_LEAVES), its sequence length changing every step
# (an unpadded text loader). Only the first 32 arguments were compared: the change was called
# "static" and given the wrong fix.
LATE_BATCH_SHAPE = (
    HEADER
    + "WIDTH = 16\n"
    + ADAM_97_LEAVES
    + r"""
length = 32
while running():
    with xmon.step():
        tokens = jnp.arange(8 * length, dtype=jnp.int32).reshape(8, length)
        params, opt_state = train_step(params, opt_state, tokens)
        jax.block_until_ready(params)
    length += 1
    time.sleep(0.05)
"""
)

# A new functools.partial each step: the same arguments and the same program, compiled again.
PARTIAL_REBUILT = (
    HEADER
    + r"""
def scaled_loss(scale, x):
    return (x * scale).sum()

x = jnp.ones((16,))
while running():
    with xmon.step():
        jax.jit(functools.partial(scaled_loss, 2.0))(x).block_until_ready()
    time.sleep(0.05)
"""
)

# Steps, then the main thread waits forever on a lock no one releases.
STALL_IN_LOCK = (
    HEADER
    + r"""
@jax.jit
def train_step(x):
    return x + 1.0

lock = threading.Lock()
lock.acquire()

def wait_for_the_loader():
    lock.acquire()

x = jnp.ones((8,))
for _ in range(30):
    with xmon.step():
        x = train_step(x)
        x.block_until_ready()
    time.sleep(0.05)
wait_for_the_loader()
"""
)

# Steps, then the step's own computation waits forever: its host callback (the loader) blocks.
STALL_IN_CALLBACK = (
    HEADER
    + r"""
lock = threading.Lock()
lock.acquire()
starved = threading.Event()

def read_batch(x):
    if starved.is_set():
        lock.acquire()
    return x

@jax.jit
def train_step(x):
    batch = jax.pure_callback(read_batch, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return batch + 1.0

x = jnp.ones((8,))
for i in range(60):
    if i == 30:
        starved.set()
    with xmon.step():
        x = train_step(x)
        x.block_until_ready()
    time.sleep(0.05)
"""
)

# Each step is a tiny computation and 50 ms of host work: the device waits.
HOST_BOUND = (
    HEADER
    + r"""
@jax.jit
def train_step(x):
    return x + 1.0

x = jnp.ones((8,))
while running():
    with xmon.step():
        time.sleep(0.05)  # the input pipeline
        x = train_step(x)
        x.block_until_ready()
"""
)

# A hand-written tokeniser: ~40 ms of numpy and Python a batch (split, look each word up).
TOKENISING_LOADER = r"""
import numpy as np

rng = np.random.default_rng(0)
vocabulary = [f"word{i}" for i in range(20_000)]
token_ids = {word: i for i, word in enumerate(vocabulary)}
corpus = " ".join(vocabulary[i] for i in rng.integers(0, len(vocabulary), 400_000))

def load_batch(step):
    start = (step * 9_973) % (len(corpus) - 1_200_000)
    words = corpus[start : start + 1_200_000].split()[1:-1]  # split and look up each word
    ids = np.fromiter((token_ids.get(w, 0) for w in words), dtype=np.int32)
    ids = np.sort(ids[: 64 * 256].reshape(64, 256), axis=1)  # bucket by length, say
    return np.asarray(ids % 128, dtype=np.float32) / 128.0
"""

# A hand-written tokenising loader in the step: ~40 ms of numpy and Python a step that keeps a
# core busy, before a small jitted step. The device idles; the process does not.
NUMPY_LOADER = (
    HEADER
    + TOKENISING_LOADER
    + r"""
@jax.jit
def train_step(w, batch):
    return jnp.tanh(batch @ w) @ w.T

w = jnp.ones((256, 256)) / 256
step = 0
while running():
    with xmon.step():
        batch = load_batch(step)
        out = train_step(w, batch)
        out.block_until_ready()
    step += 1
"""
)

# Eager initialisation at several shapes (many small compiles), then a compute-bound step.
HEALTHY = (
    HEADER
    + r"""
key = jax.random.key(0)
params = [jax.random.normal(key, (s, s)) for s in (32, 48, 64, 80, 96)]
biases = [jnp.zeros((s,)) + 1 for s in (32, 48, 64, 80, 96)]

@jax.jit
def train_step(w, x):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return x

w = jax.random.normal(key, (384, 384)) / 20
x = jax.random.normal(key, (384, 384))
while running():
    with xmon.step():
        x = train_step(w, x)
        x.block_until_ready()
"""
)
