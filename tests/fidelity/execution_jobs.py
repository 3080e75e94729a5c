"""Real JAX jobs that know what they execute, for the execution ledger's fidelity.

Run as a script under ``xmon run`` (4 CPU devices), one job per process:

    python tests/fidelity/execution_jobs.py CASE OUT_JSON

Each job computes its truth without xmon and writes it to OUT_JSON once its loop runs, then
keeps stepping until the file OUT_JSON.stop exists, and writes the truth again with its own
clock's step begins (wall time) so a test can compare rates over the same steps xmon saw:

* ``flops_per_step``: all-device FLOPs of every program the step runs, times how often it runs
  them, each from the program's own ``cost_analysis()`` (loop-free programs, where XLA's count
  is exact) and from an analytic matmul count;
* ``begins``: wall clock of every step begin; ``device_seconds`` / ``wall_seconds``: for the
  host-bound case, the time the job waited for its device and the loop's time.

Cases (the patterns the execution ledger must get right):

* ``aot``: the train step compiled ahead of time (``.lower().compile()``) and warmed up before
  the loop, so nothing compiles inside a step;
* ``same_name``: two different programs both named ``jit_step`` run every step;
* ``accumulate``: gradient accumulation, a micro-step program run 4 times a step plus an update;
* ``eval``: a train step every step and an eval program every other step;
* ``unmarked``: like ``aot`` with no step markers (``xmon run`` with no code change);
* ``scan_layers``: a scan over layers with ``jax.checkpoint`` and ``jax.grad`` as the step;
* ``host_bound``: one device computes ~20 ms, then the host sleeps 40 ms.
* ``transformer``: a small decoder-only transformer with declared model FLOPs (6·N·tokens).
* ``slow_0.3``, ``slow_2``, ``slow_10`` (``_unmarked``): the ``aot`` step padded by host work
  to 0.3 s, 2 s or 10 s, longer than a sample's configured duration;
* ``recompile``: a new program compiled and run every step (a fresh function each step).
* ``branches``: a ``lax.cond`` whose data picks its costly branch one step in four; the truth
  is what ran (``flops_per_step``) and XLA's figure, the costliest branch every step
  (``costliest_flops_per_step``);
* ``switch_layers``: a ``lax.switch`` in a scan over 6 layers, each layer's branch picked by
  its index and the step, each branch twice a step; truth and XLA's figure as ``branches``;
* ``accumulate_unmarked``: ``accumulate`` without step markers;
* ``data_movement``: the train step, then a program that only moves data (a roll along the
  features): XLA's cost analysis gives it no FLOPs key, and it does none.
* ``many_ops``: a step of 600 calls of a tiny jitted update (an optimizer stepped leaf by leaf):
  hundreds of thousands of profiler events a second, more than a sample of a second may hold.
* ``traced``: the ``aot`` job tracing itself for its whole run (``jax.profiler.start_trace``
  before its loop, stopped after it): a process has one profiler, so xmon's ledger cannot sample.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import xmon

DEVICES = 4
BATCH, WIDTH = 1024, 512
ACCUMULATE = 4
EVAL_EVERY = 2
MANY_OPS_CALLS = 600
HOST_SECONDS = 0.005  # host work per step (data loading): keeps the step rate steady


def matmul_flops(m: int, k: int, n: int) -> float:
    return 2.0 * m * k * n


def all_device_flops(compiled: Any) -> float:
    """The job's own count: XLA's per-device cost analysis times the devices it runs on."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["flops"]) * len(compiled.runtime_executable().local_devices())


class Job:
    """A job's loop: ``step()`` runs one training step, ``flops`` is its truth per step;
    each step lasts at least ``step_seconds`` (host work after the device's)."""

    def __init__(
        self, step: Callable[[int], None], flops: float, analytic: float, step_seconds: float = 0.0
    ) -> None:
        self.step = step
        self.flops = flops
        self.analytic = analytic
        self.step_seconds = step_seconds


def _data() -> tuple[Any, Any]:
    mesh = jax.make_mesh((DEVICES,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.device_put(jnp.ones((BATCH, WIDTH)), NamedSharding(mesh, P("data")))
    w = jax.device_put(jnp.full((WIDTH, WIDTH), 0.01), NamedSharding(mesh, P()))
    return x, w


def _layer(w: Any, x: Any) -> Any:
    return jnp.tanh(x @ w) @ w.T  # two matmuls: no reduction across the batch shards


def aot() -> Job:
    x, w = _data()
    compiled = jax.jit(_layer).lower(w, x).compile()
    compiled(w, x).block_until_ready()  # warm-up before the loop
    state = {"x": x}

    def step(_: int) -> None:
        state["x"] = compiled(w, state["x"])

    analytic = 2 * matmul_flops(BATCH, WIDTH, WIDTH)
    return Job(step, all_device_flops(compiled), analytic)


def slow(step_seconds: float) -> Job:
    job = aot()
    return Job(job.step, job.flops, job.analytic, step_seconds)


def recompile() -> Job:
    """A fresh function each step: jax compiles it again (a new program, the same cost)."""
    x, w = _data()
    flops = all_device_flops(jax.jit(lambda w, x: _layer(w, x)).lower(w, x).compile())

    def step(_: int) -> None:
        fresh = jax.jit(lambda w, x: _layer(w, x))
        fresh(w, x).block_until_ready()

    return Job(step, flops, 2 * matmul_flops(BATCH, WIDTH, WIDTH), step_seconds=0.3)


def same_name() -> Job:
    x, w = _data()

    def make_first() -> Callable[..., Any]:
        def step(w: Any, x: Any) -> Any:
            return jnp.tanh(x @ w)

        return jax.jit(step)

    def make_second() -> Callable[..., Any]:
        def step(w: Any, x: Any) -> Any:
            return _layer(w, _layer(w, x))

        return jax.jit(step)

    first, second = make_first(), make_second()
    flops = all_device_flops(first.lower(w, x).compile())
    flops += all_device_flops(second.lower(w, x).compile())
    state = {"x": x}

    def step(_: int) -> None:
        state["x"] = second(w, first(w, state["x"]))

    analytic = matmul_flops(BATCH, WIDTH, WIDTH) * (1 + 4)
    return Job(step, flops, analytic)


def accumulate() -> Job:
    # One device: a gradient over batch shards would all-reduce, and XLA's CPU collectives
    # can stall when a host has fewer cores than virtual devices.
    # Strongly typed: a weakly typed zeros (jnp.zeros_like of jnp.full(..., 0.01)) compiled the
    # micro-step again for its first call of each step (then three of its four calls are one
    # executable, the first another)
    x, w = jnp.ones((BATCH, WIDTH)), jnp.full((WIDTH, WIDTH), 0.01, jnp.float32)

    def loss(w: Any, x: Any) -> Any:
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    @jax.jit
    def micro(w: Any, x: Any, g: Any) -> Any:
        return g + jax.grad(loss)(w, x)

    @jax.jit
    def update(w: Any, g: Any) -> Any:
        return w - 1e-6 * g

    zeros = jnp.zeros((WIDTH, WIDTH), jnp.float32)
    flops = ACCUMULATE * all_device_flops(micro.lower(w, x, zeros).compile())
    flops += all_device_flops(update.lower(w, zeros).compile())
    state = {"w": w}

    def step(_: int) -> None:
        grads = zeros
        for _micro in range(ACCUMULATE):
            grads = micro(state["w"], x, grads)
        state["w"] = update(state["w"], grads)

    # forward x@w, backward d/dw (x^T @ dh): 2 matmuls per micro-step
    analytic = ACCUMULATE * 2 * matmul_flops(BATCH, WIDTH, WIDTH)
    return Job(step, flops, analytic)


def evaluate(every: int = EVAL_EVERY) -> Job:
    """A train step, and an eval (twice its work) every ``every`` steps: at 10, a sample
    holds a few evals, and a window cut at arbitrary times would count one more or less."""
    x, w = _data()
    train = jax.jit(_layer)
    # No reduction over the batch shards: an all-reduce can stall XLA's CPU collectives when a
    # host has fewer cores than virtual devices.
    check = jax.jit(lambda w, x: _layer(w, _layer(w, x)))
    flops = all_device_flops(train.lower(w, x).compile())
    flops += all_device_flops(check.lower(w, x).compile()) / every
    state = {"x": x}

    def step(i: int) -> None:
        state["x"] = train(w, state["x"])
        if i % every == 0:
            check(w, state["x"])

    analytic = 2 * matmul_flops(BATCH, WIDTH, WIDTH) * (1 + 2 / every)
    return Job(step, flops, analytic)


HEAVY_EVERY = 4  # the branches case takes its costly branch on one step in four


def branches() -> tuple[Job, float]:
    """The step's ``lax.cond`` runs two matmuls when its step counter says so, a scaling
    otherwise; returns the job (its truth: what ran) and XLA's figure for the step program."""
    x, w = _data()

    def light(w: Any, v: Any) -> Any:
        return v * 0.5

    def pick(w: Any, v: Any, k: Any) -> Any:
        return lax.cond(k % HEAVY_EVERY == 0, _layer, light, w, v)

    k = jnp.int32(0)
    step_program = jax.jit(pick).lower(w, x, k).compile()
    heavy_flops = all_device_flops(jax.jit(_layer).lower(w, x).compile())
    light_flops = all_device_flops(jax.jit(light).lower(w, x).compile())
    flops = (heavy_flops + (HEAVY_EVERY - 1) * light_flops) / HEAVY_EVERY
    state = {"x": x}

    def step(i: int) -> None:
        state["x"] = step_program(w, state["x"], jnp.int32(i))

    analytic = 2 * matmul_flops(BATCH, WIDTH, WIDTH) / HEAVY_EVERY  # the scaling is ~0.1 %
    return Job(step, flops, analytic), all_device_flops(step_program)


SWITCH_LAYERS = 6  # the switch_layers case: layers, each taking one of three branches


def switch_layers() -> tuple[Job, float]:
    """A scan over layers whose ``lax.switch`` picks each layer's branch from its index and the
    step (two matmuls, one, or a scaling: ``(layer + step) % 3``), so every step runs each
    branch twice, in another order. The truth counts what ran: each branch's own cost, twice;
    returns the job and XLA's figure for the step program (the costliest branch every layer)."""
    x, w = _data()

    def one(w: Any, v: Any) -> Any:
        return jnp.tanh(v @ w)

    def scale(w: Any, v: Any) -> Any:
        return v * 0.5

    branches = (_layer, one, scale)

    def layers(w: Any, v: Any, k: Any) -> Any:
        def body(v: Any, layer: Any) -> tuple[Any, None]:
            return lax.switch((layer + k) % 3, branches, w, v), None

        return lax.scan(body, v, jnp.arange(SWITCH_LAYERS))[0]

    k = jnp.int32(0)
    step_program = jax.jit(layers).lower(w, x, k).compile()
    each = [all_device_flops(jax.jit(b).lower(w, x).compile()) for b in branches]
    flops = SWITCH_LAYERS // 3 * sum(each)
    state = {"x": x}

    def step(i: int) -> None:
        state["x"] = step_program(w, state["x"], jnp.int32(i))

    analytic = SWITCH_LAYERS // 3 * 3 * matmul_flops(BATCH, WIDTH, WIDTH)  # 2 + 1 a pair
    return Job(step, flops, analytic), all_device_flops(step_program)


def data_movement() -> Job:
    """The ``aot`` step, then a roll of the activations along their features (each device
    moves its own shard: no collective), which XLA costs with bytes and no FLOPs key."""
    x, w = _data()
    train = jax.jit(_layer).lower(w, x).compile()
    roll = jax.jit(lambda v: jnp.roll(v, 1, axis=1)).lower(x).compile()
    costs = roll.cost_analysis()
    costs = costs[0] if isinstance(costs, list) else costs
    assert "flops" not in costs, costs  # what the case is about
    state = {"x": x}

    def step(_: int) -> None:
        state["x"] = roll(train(w, state["x"]))

    analytic = 2 * matmul_flops(BATCH, WIDTH, WIDTH)
    return Job(step, all_device_flops(train), analytic)


def scan_layers() -> Job:
    """MaxText's train step: scan over stacked layers with jax.checkpoint and jax.grad (the
    fidelity suite's pattern). Truth: the cost analysis of its unrolled twin, which runs the
    same matmuls without a loop, and the analytic matmul count."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import patterns

    pattern = patterns.scan_layers_remat_grad()
    compiled = pattern.fn.lower(*pattern.args).compile()
    devices = len(compiled.runtime_executable().local_devices())
    ws, x = pattern.args
    # the update runs as its own small program: it counts too
    update = jax.jit(lambda ws, g: ws - 1e-6 * g).lower(ws, ws).compile()
    state = {"ws": ws}

    def step(_: int) -> None:
        grads, _gx = compiled(state["ws"], x)
        state["ws"] = update(state["ws"], grads)

    assert pattern.truth is not None
    flops = pattern.truth * devices + all_device_flops(update)
    return Job(step, flops, pattern.matmul_flops * devices + all_device_flops(update))


def host_bound() -> tuple[Job, dict[str, float]]:
    """One device computes, then the host sleeps; the job times its own waits."""
    a = jnp.ones((768, 768))
    f = jax.jit(lambda a: jnp.tanh(a @ a) @ a)
    f(a).block_until_ready()
    waits = {"device_seconds": 0.0}

    def step(_: int) -> None:
        started = time.perf_counter()
        f(a).block_until_ready()
        waits["device_seconds"] += time.perf_counter() - started
        time.sleep(0.04 - HOST_SECONDS)

    flops = all_device_flops(f.lower(a).compile())
    return Job(step, flops, 2 * matmul_flops(768, 768, 768)), waits


def transformer() -> tuple[Job, float]:
    """A 2-layer decoder (attention + MLP) trained with SGD; returns the job and its model
    FLOPs per step by the 6·N·tokens rule (N: non-embedding parameters)."""
    layers, d, heads, seq, batch, vocab = 2, 128, 4, 64, 8, 256
    keys = iter(jax.random.split(jax.random.key(0), 32))

    def dense(shape: tuple[int, ...]) -> Any:
        return jax.random.normal(next(keys), shape) / shape[0] ** 0.5

    params = {
        "embed": dense((vocab, d)),
        "layers": [
            {
                "qkv": dense((d, 3 * d)),
                "out": dense((d, d)),
                "up": dense((d, 4 * d)),
                "down": dense((4 * d, d)),
            }  # fmt: skip
            for _ in range(layers)
        ],
    }
    n_params = sum(x.size for layer in params["layers"] for x in layer.values())

    def forward(p: Any, tokens: Any) -> Any:
        h = p["embed"][tokens]
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        for layer in p["layers"]:
            q, k, v = jnp.split(h @ layer["qkv"], 3, axis=-1)
            q, k, v = (t.reshape(batch, seq, heads, d // heads) for t in (q, k, v))
            scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // heads) ** 0.5
            attn = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
            h = h + jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(batch, seq, d) @ layer["out"]
            h = h + jax.nn.gelu(h @ layer["up"]) @ layer["down"]
        return h @ p["embed"].T

    def loss(p: Any, tokens: Any) -> Any:
        logits = forward(p, tokens[:, :-1])
        targets = jax.nn.one_hot(tokens[:, 1:], vocab)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=-1))

    seq += 1  # one more token than the model sees, for the targets
    tokens = jax.random.randint(next(keys), (batch, seq), 0, vocab)
    seq -= 1
    train = jax.jit(
        lambda p, t: jax.tree.map(lambda w, g: w - 1e-3 * g, p, jax.grad(loss)(p, t)),
        donate_argnums=0,
    )
    compiled = train.lower(params, tokens).compile()
    state = {"p": params}

    def step(_: int) -> None:
        state["p"] = compiled(state["p"], tokens)

    model_flops = xmon.flops_per_token(n_params) * batch * seq
    return Job(step, all_device_flops(compiled), model_flops), model_flops


def many_ops() -> Job:
    """A step of MANY_OPS_CALLS calls of one tiny jitted update (an optimizer stepped leaf by
    leaf, outside jit): each call is a dozen profiler events on the CPU backend."""
    update = jax.jit(lambda a: jnp.tanh(a) * 1.0001 + 0.001)
    leaves = [jnp.full((8,), float(i)) for i in range(MANY_OPS_CALLS)]
    compiled = update.lower(leaves[0]).compile()
    jax.block_until_ready([compiled(leaf) for leaf in leaves])

    def step(_: int) -> None:
        leaves[:] = [compiled(leaf) for leaf in leaves]
        jax.block_until_ready(leaves)

    flops = 2.0 * leaves[0].size * MANY_OPS_CALLS  # a multiply and an add per element
    return Job(step, flops, flops)


def _host_work(began: float, step_seconds: float) -> None:
    """The step's host work (data loading): HOST_SECONDS, or up to ``step_seconds``."""
    time.sleep(max(HOST_SECONDS, step_seconds - (time.perf_counter() - began)))


def main(case: str, out: Path) -> None:
    extra: dict[str, float] = {}
    waits: dict[str, float] = {}
    marked = not case.endswith("unmarked")
    if case in ("aot", "unmarked", "traced"):
        job = aot()
    elif case.startswith("slow_"):
        job = slow(float(case.split("_")[1]))
    elif case == "recompile":
        job = recompile()
    elif case == "same_name":
        job = same_name()
    elif case in ("accumulate", "accumulate_unmarked"):
        job = accumulate()
    elif case == "eval":
        job = evaluate()
    elif case.startswith("eval_"):
        job = evaluate(int(case.split("_")[1]))
    elif case == "scan_layers":
        job = scan_layers()
    elif case == "branches":
        job, costliest = branches()
        extra["costliest_flops_per_step"] = costliest
    elif case == "switch_layers":
        job, costliest = switch_layers()
        extra["costliest_flops_per_step"] = costliest
    elif case == "data_movement":
        job = data_movement()
    elif case == "host_bound":
        job, waits = host_bound()
    elif case == "many_ops":
        job = many_ops()
        extra["calls_per_step"] = MANY_OPS_CALLS
    elif case == "transformer":
        job, model_flops = transformer()
        xmon.declare_model_flops(per_step=model_flops)
        extra["model_flops_per_step"] = model_flops
    else:
        raise SystemExit(f"unknown case {case!r}")
    truth = {"case": case, "flops_per_step": job.flops, "analytic_flops_per_step": job.analytic,
             **extra}  # fmt: skip
    out.write_text(json.dumps(truth))
    if case == "traced":
        jax.profiler.start_trace(str(out.with_suffix(".trace")))
    stop = Path(f"{out}.stop")
    begins: list[float] = []
    started = time.perf_counter()
    i = 0
    while not stop.exists():
        begins.append(time.time())
        began = time.perf_counter()
        if marked:
            with xmon.step():
                job.step(i)
                _host_work(began, job.step_seconds)
        else:
            job.step(i)
            _host_work(began, job.step_seconds)
        i += 1
    jax.effects_barrier()
    if case == "traced":
        jax.profiler.stop_trace()
    truth.update(begins=begins, wall_seconds=time.perf_counter() - started, **waits)
    out.write_text(json.dumps(truth))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
