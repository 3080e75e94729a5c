"""Healthy JAX jobs for the false-positive run: each trains until its stop file appears (or
``JOB_SECONDS`` pass), steadily, as a real job would."""

from __future__ import annotations

HEADER = r"""
import os, time
import jax, jax.numpy as jnp
import xmon

STOP = os.environ["JOB_STOP"]
DEADLINE = time.monotonic() + float(os.environ.get("JOB_SECONDS", "400"))


def running():
    return not os.path.exists(STOP) and time.monotonic() < DEADLINE
"""

# A two-layer MLP trained with SGD on a fixed batch, large enough that the device computes
# most of each step (a much smaller one is dispatch-bound: host_bound says so, rightly).
MLP = (
    HEADER
    + r"""
key = jax.random.key(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {"w1": jax.random.normal(k1, (512, 2048)) / 22,
          "w2": jax.random.normal(k2, (2048, 10)) / 45}
x = jax.random.normal(k3, (512, 512))
y = jax.nn.one_hot(jnp.arange(512) % 10, 10)

def loss(p, x, y):
    h = jax.nn.relu(x @ p["w1"])
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ p["w2"]) * y, axis=-1))

@jax.jit
def train_step(p, x, y):
    value, grads = jax.value_and_grad(loss)(p, x, y)
    return jax.tree.map(lambda a, g: a - 0.01 * g, p, grads), value

while running():
    with xmon.step():
        params, value = train_step(params, x, y)
        value.block_until_ready()
"""
)

# A small decoder-only transformer: parameters initialised eagerly at many shapes, a train
# step that donates its parameters and optimiser state (Adam by hand).
TRANSFORMER = (
    HEADER
    + r"""
VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 256, 128, 4, 2, 64, 8
key = jax.random.key(1)

def dense(shape):
    global key
    key, sub = jax.random.split(key)
    return jax.random.normal(sub, shape) / jnp.sqrt(shape[0])

params = {"embed": dense((VOCAB, D)), "out": dense((D, VOCAB)), "layers": [
    {"qkv": dense((D, 3 * D)), "proj": dense((D, D)), "up": dense((D, 4 * D)),
     "down": dense((4 * D, D)), "ln1": jnp.ones((D,)), "ln2": jnp.ones((D,))}
    for _ in range(LAYERS)]}
opt = {"m": jax.tree.map(jnp.zeros_like, params), "v": jax.tree.map(jnp.zeros_like, params)}

def norm(x, g):
    return g * (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)

def forward(p, tokens):
    x = p["embed"][tokens]
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    for layer in p["layers"]:
        q, k, v = jnp.split(norm(x, layer["ln1"]) @ layer["qkv"], 3, axis=-1)
        heads = lambda t: t.reshape(BATCH, SEQ, HEADS, D // HEADS).transpose(0, 2, 1, 3)
        att = heads(q) @ heads(k).transpose(0, 1, 3, 2) / jnp.sqrt(D // HEADS)
        att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1) @ heads(v)
        x = x + att.transpose(0, 2, 1, 3).reshape(BATCH, SEQ, D) @ layer["proj"]
        x = x + jax.nn.gelu(norm(x, layer["ln2"]) @ layer["up"]) @ layer["down"]
    return x @ p["out"]

def loss(p, tokens):
    logits = forward(p, tokens)
    targets = jnp.roll(tokens, -1, axis=1)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1))

def update(p, opt, tokens, step):
    value, grads = jax.value_and_grad(loss)(p, tokens)
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, opt["m"], grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, opt["v"], grads)
    p = jax.tree.map(lambda a, m, v: a - 1e-3 * m / (jnp.sqrt(v) + 1e-8), p, m, v)
    return p, {"m": m, "v": v}, value

train_step = jax.jit(update, donate_argnums=(0, 1))
tokens = jax.random.randint(jax.random.key(2), (BATCH, SEQ), 0, VOCAB)
step = 0
while running():
    with xmon.step():
        params, opt, value = train_step(params, opt, tokens, step)
        value.block_until_ready()
    step += 1
"""
)
