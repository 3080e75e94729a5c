"""Programs with while loops, each with the FLOPs one execution really does, found without xmon.

Each builder returns a :class:`Pattern` ``(name, truth, fn, args, ...)``: ``fn.lower(*args)``
compiles the program; ``truth`` is the per-device ``cost_analysis()['flops']`` of an unrolled
twin (the same computation written as straight-line Python, so XLA sees no loop);
``matmul_flops`` is the analytic 2·m·n·k of every matmul one execution runs on one device. Both
are computed here without xmon, for the fidelity tests and for reports
(``sys.path.insert(0, "tests/fidelity"); import patterns``). Needs 4 JAX devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4`` on CPU); nothing is executed but the
data-dependent loop's check on one device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

TRIPS = 40
BATCH, WIDTH = 16, 512  # matmuls dominate: elementwise work is under 1 % of the FLOPs
LAYERS = 8
DEVICES = 4


class Pattern(NamedTuple):
    name: str
    truth: float | None  # per-device FLOPs of one execution (None: not knowable statically)
    fn: Any  # jitted, pmapped or shard_mapped: fn.lower(*args).compile()
    args: tuple[Any, ...]
    matmul_flops: float  # analytic, per device
    lower_bound: bool = False  # the trip count depends on the data: xmon must say so


def matmul(m: int, k: int, n: int) -> float:
    return 2.0 * m * k * n


def twin_flops(fn: Any, *args: Any) -> float:
    """cost_analysis()['flops'] of an unrolled twin, which must have no loop left."""
    compiled = fn.lower(*args).compile()
    assert " while(" not in compiled.as_text(), "the twin still has a loop: not a truth"
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"])


def _operands(batch: int = BATCH) -> tuple[jax.Array, jax.Array]:
    return jnp.ones((batch, WIDTH), jnp.float32), jnp.full((WIDTH, WIDTH), 0.01, jnp.float32)


def _layer(c: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(c @ w)


def _unrolled(c: jax.Array, w: jax.Array, trips: int = TRIPS) -> jax.Array:
    for _ in range(trips):
        c = _layer(c, w)
    return c


def scan_matmul() -> Pattern:
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.scan(lambda c, _: (_layer(c, w), None), x, None, length=TRIPS)[0]

    args = _operands()
    truth = twin_flops(jax.jit(_unrolled), *args)
    return Pattern("scan", truth, jax.jit(f), args, TRIPS * matmul(BATCH, WIDTH, WIDTH))


def fori_loop_matmul() -> Pattern:
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.fori_loop(0, TRIPS, lambda i, c: _layer(c, w), x)

    args = _operands()
    truth = twin_flops(jax.jit(_unrolled), *args)
    return Pattern("fori_loop", truth, jax.jit(f), args, TRIPS * matmul(BATCH, WIDTH, WIDTH))


def while_loop_matmul() -> Pattern:
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        def body(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            i, c = state
            return i + 1, _layer(c, w)

        return lax.while_loop(lambda s: s[0] < TRIPS, body, (jnp.int32(0), x))[1]

    args = _operands()
    truth = twin_flops(jax.jit(_unrolled), *args)
    return Pattern("while_loop", truth, jax.jit(f), args, TRIPS * matmul(BATCH, WIDTH, WIDTH))


def scan_layers_remat_grad() -> Pattern:
    """MaxText's pattern: stacked layer weights, scan over layers, jax.checkpoint, jax.grad."""

    def loss_scan(ws: jax.Array, x: jax.Array) -> jax.Array:
        step = jax.checkpoint(_layer)
        return jnp.sum(lax.scan(lambda c, w: (step(c, w), None), x, ws)[0] ** 2)

    def grad_unrolled(ws: jax.Array, x: jax.Array, zero: jax.Array) -> tuple[jax.Array, jax.Array]:
        # What the scan runs, layer by layer: the forward keeps only each layer's input; the
        # backward recomputes the layer and takes both gradients. Adding ``zero`` (a runtime
        # 0) stops XLA from reusing the forward's result, which the looped program cannot do
        # either (CPU XLA drops optimization barriers before CSE).
        inputs = []
        for layer in range(LAYERS):
            inputs.append(x)
            x = _layer(x, ws[layer])
        g = 2.0 * x
        grads = []
        for layer in reversed(range(LAYERS)):
            _, vjp = jax.vjp(_layer, inputs[layer] + zero, ws[layer])
            g, g_w = vjp(g)
            grads.append(g_w)
        return jnp.stack(grads[::-1]), g

    x, w = _operands()
    ws = jnp.stack([w] * LAYERS)
    # per layer: the forward, its recomputation, then x-gradient and w-gradient matmuls
    analytic = LAYERS * 4 * matmul(BATCH, WIDTH, WIDTH)
    truth = twin_flops(jax.jit(grad_unrolled), ws, x, jnp.float32(0.0))
    fn = jax.jit(jax.grad(loss_scan, argnums=(0, 1)))  # both: no layer's x-gradient is dead
    return Pattern("scan_layers_remat_grad", truth, fn, (ws, x), analytic)


def nested_scans(outer: int = 5, inner: int = 8) -> Pattern:
    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        def inner_loop(c: jax.Array, _: None) -> tuple[jax.Array, None]:
            return lax.scan(lambda d, _: (_layer(d, w), None), c, None, length=inner)[0], None

        return lax.scan(inner_loop, x, None, length=outer)[0]

    args = _operands()
    truth = twin_flops(jax.jit(lambda x, w: _unrolled(x, w, outer * inner)), *args)
    analytic = outer * inner * matmul(BATCH, WIDTH, WIDTH)
    return Pattern("nested_scans", truth, jax.jit(f), args, analytic)


def _shard_map() -> Callable[..., Any]:
    found = getattr(jax, "shard_map", None)
    if found is None:  # jax < 0.7
        from jax.experimental.shard_map import shard_map as found
    return found  # type: ignore[no-any-return]


def _normalised_layer(c: jax.Array, w: jax.Array) -> jax.Array:
    c = _layer(c, w)
    return c / (1.0 + lax.psum(jnp.sum(c), "d"))  # a collective on every trip


def loop_in_shard_map() -> Pattern:
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((DEVICES,), ("d",))
    shard_map = _shard_map()
    specs: dict[str, Any] = {
        "mesh": mesh,
        "in_specs": (PartitionSpec("d"), PartitionSpec()),
        "out_specs": PartitionSpec("d"),
    }

    def looped(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.fori_loop(0, TRIPS, lambda i, c: _normalised_layer(c, w), x)

    def unrolled(x: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(TRIPS):
            x = _normalised_layer(x, w)
        return x

    x, w = _operands(BATCH * DEVICES)
    args = (
        jax.device_put(x, NamedSharding(mesh, PartitionSpec("d"))),
        jax.device_put(w, NamedSharding(mesh, PartitionSpec())),
    )
    truth = twin_flops(jax.jit(shard_map(unrolled, **specs)), *args)
    fn = jax.jit(shard_map(looped, **specs))
    return Pattern("shard_map", truth, fn, args, TRIPS * matmul(BATCH, WIDTH, WIDTH))


def loop_in_pmap() -> Pattern:
    def looped(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.scan(lambda c, _: (_normalised_layer(c, w), None), x, None, length=TRIPS)[0]

    def unrolled(x: jax.Array, w: jax.Array) -> jax.Array:
        for _ in range(TRIPS):
            x = _normalised_layer(x, w)
        return x

    x, w = _operands()
    args = (jnp.stack([x] * DEVICES), jnp.stack([w] * DEVICES))
    truth = twin_flops(jax.pmap(unrolled, axis_name="d"), *args)
    fn = jax.pmap(looped, axis_name="d")
    return Pattern("pmap", truth, fn, args, TRIPS * matmul(BATCH, WIDTH, WIDTH))


def data_dependent_while(limit: float = 1000.0) -> Pattern:
    """A while_loop that stops when its data says so: no trip count is knowable from the HLO.

    Each trip adds 1 to every element of ``t`` (BATCH elements) and runs one matmul, until
    ``sum(t) >= limit``: ceil(limit / BATCH) trips, checked by running it.
    """

    def f(x: jax.Array, w: jax.Array, t: jax.Array) -> jax.Array:
        def body(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            c, t = state
            return _layer(c, w), t + 1.0

        return lax.while_loop(lambda s: jnp.sum(s[1]) < limit, body, (x, t))[0]

    x, w = _operands()
    t = jnp.zeros((BATCH,), jnp.float32)
    trips = math.ceil(limit / BATCH)

    def count(t: jax.Array) -> jax.Array:
        return lax.while_loop(lambda s: jnp.sum(s[1]) < limit, lambda s: (s[0] + 1, s[1] + 1.0),
                              (0, t))[0]  # fmt: skip

    ran = jax.jit(count)(t)
    assert int(ran) == trips, (int(ran), trips)
    # the twin unrolls what runs: the matmuls and the counter updates of every trip
    truth = twin_flops(jax.jit(lambda x, w: _unrolled(x, w, trips)), x, w)
    fn = jax.jit(f)
    analytic = trips * matmul(BATCH, WIDTH, WIDTH)
    return Pattern("data_dependent_while", truth, fn, (x, w, t), analytic, lower_bound=True)


BUILDERS: dict[str, Callable[[], Pattern]] = {
    "scan": scan_matmul,
    "fori_loop": fori_loop_matmul,
    "while_loop": while_loop_matmul,
    "scan_layers_remat_grad": scan_layers_remat_grad,
    "nested_scans": nested_scans,
    "shard_map": loop_in_shard_map,
    "pmap": loop_in_pmap,
    "data_dependent_while": data_dependent_while,
}


def all_patterns() -> list[Pattern]:
    return [build() for build in BUILDERS.values()]
