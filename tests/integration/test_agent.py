"""The in-job agent, in this process, with real JAX on CPU (several virtual devices)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import xmon
from xmon.agent import compiles as compiles_module
from xmon.agent.core import Agent


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """An attached agent with no daemon behind its socket."""
    attached = xmon.attach(job_name="unit", period=60, socket_path=tmp_path / "absent.sock")
    yield attached
    xmon.detach()


def _program(agent: Agent, name: str):  # type: ignore[no-untyped-def]
    record = agent.compiles.program_by_name(name)
    assert record is not None, [p.name for p in agent.compiles.programs()]
    return record


@pytest.mark.parametrize("m,k,n", [(64, 32, 16), (128, 256, 8), (1, 7, 3)])
def test_matmul_flops_are_exactly_2mnk(agent: Agent, m: int, k: int, n: int) -> None:
    def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
        return a @ b

    matmul.__name__ = f"matmul_{m}_{k}_{n}"
    jax.jit(matmul)(jnp.ones((m, k)), jnp.ones((k, n))).block_until_ready()
    record = _program(agent, f"jit_matmul_{m}_{k}_{n}")
    assert record.flops == 2 * m * n * k
    assert record.flops_xla == 2 * m * n * k
    assert record.argument_bytes == 4 * (m * k + k * n)
    assert record.output_bytes == 4 * m * n
    assert record.fun_name == f"jit(matmul_{m}_{k}_{n})"
    assert record.compile_seconds is not None and record.compile_seconds > 0


def test_a_program_that_only_moves_data_has_zero_flops_not_unknown(agent: Agent) -> None:
    """XLA's cost analysis leaves "flops" out of a transpose or a copy; that is 0 FLOPs, and
    a step holding one is no lower bound for it."""

    def transposed(x: jax.Array) -> jax.Array:
        return jnp.concatenate([x.T, x.T])

    jax.jit(transposed)(jnp.ones((64, 32))).block_until_ready()
    agent.hlo.drain()
    record = _program(agent, "jit_transposed")
    assert record.flops == 0.0 and record.flops_xla == 0.0
    assert not record.flops_lower_bound and record.bytes_accessed


def test_sharded_program_reports_per_device_cost_and_its_device_count(agent: Agent) -> None:
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,))
    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, PartitionSpec("d")))
    w = jax.device_put(jnp.ones((32, 16)), NamedSharding(mesh, PartitionSpec()))

    @jax.jit
    def sharded_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
        return x @ w

    sharded_matmul(x, w).block_until_ready()
    record = _program(agent, "jit_sharded_matmul")
    assert record.num_devices == 4
    assert record.flops == 2 * (64 // 4) * 16 * 32  # per device, as XLA reports it


def test_compile_events_are_counted_and_recompiles_detected(agent: Agent) -> None:
    before = agent.compiles.stats()

    @jax.jit
    def recompiled(x: jax.Array) -> jax.Array:
        return x * 2

    recompiled(jnp.ones(3))
    recompiled(jnp.ones(3))  # cached: no compile
    recompiled(jnp.ones(5))  # new shape: recompile
    after = agent.compiles.stats()
    assert after.compiles_total >= before.compiles_total + 2
    assert after.recompiles_total >= before.recompiles_total + 1
    assert after.backend_compile_seconds_total > before.backend_compile_seconds_total
    names = [e.fun_name for e in agent.compiles.take_events()]
    assert names.count("jit(recompiled)") == 2


def test_no_cache_requests_while_the_persistent_cache_is_off(agent: Agent) -> None:
    assert not jax.config.jax_compilation_cache_dir, "the test job sets no cache directory"
    before = agent.compiles.stats()
    jax.jit(lambda x: x * 3 + 1)(jnp.ones(7)).block_until_ready()
    after = agent.compiles.stats()
    assert after.compiles_total > before.compiles_total
    assert after.cache_requests_total == before.cache_requests_total == 0


def test_programs_compiled_inside_steps_are_marked(agent: Agent) -> None:
    @jax.jit
    def outside(x: jax.Array) -> jax.Array:
        return x + 1

    @jax.jit
    def inside(x: jax.Array) -> jax.Array:
        return x - 1

    outside(jnp.ones(2))
    with xmon.step():
        inside(jnp.ones(2))
    assert not _program(agent, "jit_outside").in_step
    assert _program(agent, "jit_inside").in_step


def test_cpu_memory_falls_back_to_live_array_bytes(agent: Agent) -> None:
    arrays = [jax.device_put(jnp.ones(1000, jnp.float32), d) for d in jax.local_devices()]
    agent._refresh_devices()
    before = time.time()
    message, _ = agent.build_report()
    samples = {s.device_id: s for s in message.report.memory}
    assert set(samples) == {0, 1, 2, 3}
    for sample in samples.values():
        assert dict(sample.stats) == {}  # CPU has no allocator stats
        assert sample.live_array_bytes >= 4000
        # when it was read: a paced reading can be older than the report carrying it
        assert before - 1.0 <= sample.live_array_read_at <= time.time()
    assert [d.device_kind for d in message.report.devices] == ["cpu"] * 4
    del arrays


def test_report_without_daemon_is_dropped_and_counted(agent: Agent) -> None:
    agent._report_once()
    agent._report_once()
    assert agent.transport.counters.reports_dropped >= 2
    message, _ = agent.build_report()
    assert message.report.agent.reports_dropped_total >= 2


def test_a_failing_listener_never_reaches_user_code(agent: Agent, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(compiles_module, "describe_executable", broken)

    @jax.jit
    def still_works(x: jax.Array) -> jax.Array:
        return x * 3

    assert float(still_works(jnp.ones(())).block_until_ready()) == 3.0


def test_attach_is_idempotent_and_detach_restores_the_compile_hook(tmp_path: Path) -> None:
    from jax._src import compiler

    original = compiler.compile_or_get_cached
    first = xmon.attach(job_name="a", socket_path=tmp_path / "s.sock")
    assert xmon.attach(job_name="b") is first
    assert compiler.compile_or_get_cached is not original
    xmon.detach()
    assert compiler.compile_or_get_cached is original
    assert not xmon.is_attached()


def test_step_trace_annotation_counts_as_a_step(agent: Agent) -> None:
    before = agent.steps.steps_total
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            pass
    assert agent.steps.steps_total == before + 3
