"""A small real JAX training job for ``xmon demo``: an MLP regressor, data-parallel over every
local device, with the agent attached and steps marked.

Run alone with ``python -m xmon.demo``; with several CPU devices via
``XLA_FLAGS=--xla_force_host_platform_device_count=4``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import xmon


def _mesh(jax: Any) -> Any:
    devices = jax.local_devices()
    try:
        from jax.sharding import AxisType

        return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,))
    except (ImportError, TypeError):  # jax without axis types
        return jax.make_mesh((len(devices),), ("data",))


def train(steps: int, batch: int, width: int, job_name: str, report_every: int) -> None:
    """One independent model replica per device (an ensemble), so the step has no
    cross-device collective: XLA's CPU collectives can stall when a host has fewer cores than
    virtual devices, and the demo must run anywhere."""
    xmon.attach(job_name=job_name)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    n = len(jax.local_devices())
    per_device = NamedSharding(_mesh(jax), PartitionSpec("data"))
    keys = jax.random.split(jax.random.key(0), 4)

    def init(shape: tuple[int, ...], key: Any) -> Any:
        return jax.random.normal(key, (n, *shape)) / shape[0] ** 0.5

    params = jax.device_put(
        {
            "w1": init((width, width), keys[0]),
            "w2": init((width, width), keys[1]),
            "w3": init((width, 1), keys[2]),
        },
        per_device,
    )
    # Scaled so x @ target is ~N(0, 1): sin() of it is a smooth function the MLP can learn,
    # where an unscaled target (std sqrt(width)) made the labels noise and the loss flat.
    target = jax.random.normal(keys[3], (width, 1)) / width**0.5

    def loss_fn(p: dict[str, Any], x: Any, y: Any) -> Any:
        h = jnp.tanh(x @ p["w1"])
        h = jnp.tanh(h @ p["w2"])
        return jnp.mean((h @ p["w3"] - y) ** 2)

    def replica_step(p: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda w, g: w - 0.05 * g, p, grads), loss

    train_step = jax.jit(jax.vmap(replica_step), out_shardings=(per_device, per_device))

    def batch_for(key: Any) -> tuple[Any, Any]:
        x = jax.random.normal(key, (n, batch, width))
        return x, jnp.sin(x @ target)

    make_batch = jax.jit(batch_for, out_shardings=(per_device, per_device))
    # Model FLOPs for MFU: 6 per parameter per example (forward 2, backward 4), every replica,
    # as the 6·N rule declares them. XLA runs about 5·N: the first layer's input gradient is
    # never computed (its input is data), so HFU reads about 5/6 of MFU here (README).
    weights = width * width * 2 + width
    xmon.declare_model_flops(per_step=6.0 * weights * batch * n)
    key = jax.random.key(1)
    step = 0
    started = time.perf_counter()
    while steps <= 0 or step < steps:
        key, sub = jax.random.split(key)
        with xmon.step():
            x, y = make_batch(sub)
            params, loss = train_step(params, x, y)
        step += 1
        if report_every and (step == 1 or step % report_every == 0):
            rate = step / (time.perf_counter() - started)
            mean_loss = float(np.asarray(loss).mean())
            print(f"demo: step {step} loss {mean_loss:.4f} ({rate:.1f} steps/s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=0, help="0 = run until interrupted")
    parser.add_argument("--batch", type=int, default=64, help="per device")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--job-name", default="demo")
    parser.add_argument("--report-every", type=int, default=200)
    args = parser.parse_args(argv)
    try:
        train(args.steps, args.batch, args.width, args.job_name, args.report_every)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
