"""HLO module ids: the agent reads them from real executables, and they are the ``program_id``
that jax's profiler writes into a real trace (counted by the daemon's reader)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from xmon.agent.hlo_store import hlo_module_id, module_ids, serialized_modules
from xmon.execution.xplane import count_files


def _trace(tmp_path: Path, calls: list[tuple[object, tuple[object, ...], int]]) -> dict[int, int]:
    """Run each function its number of times inside a real jax.profiler trace; count it."""
    jax.profiler.start_trace(str(tmp_path))
    try:
        for function, args, times in calls:
            for _ in range(times):
                function(*args).block_until_ready()  # type: ignore[operator]
    finally:
        jax.profiler.stop_trace()
    paths = [str(p) for p in tmp_path.glob("plugins/profile/*/*.xplane.pb")]
    assert paths, "jax wrote no trace"
    return count_files(paths, tmp_path)


def _ids_of(compiled: jax.stages.Compiled) -> tuple[int, ...]:
    executable = compiled.runtime_executable()
    assert executable is not None
    return module_ids(serialized_modules(list(executable.hlo_modules())))


def test_module_id_of_a_real_executable_is_the_traces_program_id(tmp_path: Path) -> None:
    @jax.jit
    def scale(x: jax.Array) -> jax.Array:
        return jnp.tanh(x * 3.0)

    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,))
    sharded = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, PartitionSpec("d")))

    @jax.jit
    def total(x: jax.Array) -> jax.Array:
        return x.sum()

    x = jnp.ones((32, 32))
    scale_ids = _ids_of(scale.lower(x).compile())
    total_ids = _ids_of(total.lower(sharded).compile())
    assert len(scale_ids) == 1 and len(total_ids) == 1 and scale_ids != total_ids

    counts = _trace(tmp_path, [(scale, (x,), 7), (total, (sharded,), 5)])
    # one execution on 4 devices is one run: counted once
    assert counts[scale_ids[0]] == 7 and counts[total_ids[0]] == 5


def test_hlo_module_id_reads_field_5_as_int64() -> None:
    # HloModuleProto: name = 1 ("m"), id = 5 (varint); negative int64 is ten varint bytes
    assert hlo_module_id(b"\x0a\x01m\x28\x2a") == 42
    assert hlo_module_id(b"\x28" + b"\xff" * 9 + b"\x01") == -1
    assert hlo_module_id(b"\x0a\x01m") == 0, "proto3 leaves out a zero id"
