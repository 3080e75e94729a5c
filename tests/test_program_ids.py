"""HLO module ids: the agent reads them from real executables, and they are the ``program_id``
that jax's profiler writes into a real trace (counted by the daemon's reader)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import xmon
from xmon.agent.compiles import MAX_PROGRAM_IDS
from xmon.agent.core import Agent
from xmon.agent.hlo_store import hlo_module_id, module_ids, serialized_modules
from xmon.execution.xplane import count_files


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """An attached agent with no daemon behind its socket."""
    attached = xmon.attach(job_name="ids", period=60, socket_path=tmp_path / "absent.sock")
    yield attached
    xmon.detach()


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


def test_agent_reports_ids_from_its_own_thread_and_resends_the_program(agent: Agent) -> None:
    @jax.jit
    def counted(x: jax.Array) -> jax.Array:
        return x + 1.0

    counted(jnp.ones(4)).block_until_ready()
    _, in_flight = agent.build_report()  # taken for a report before the ids are read
    [record] = [p for p in in_flight if p.name == "jit_counted"]
    assert record.program_ids == (), "nothing is read on the compiling thread"
    agent.hlo.drain()  # what the agent thread does after each report
    agent.compiles.mark_sent(in_flight)  # that report is delivered after the ids came in
    [record] = [p for p in agent.compiles.unsent_programs() if p.name == "jit_counted"]
    assert record.program_ids == _ids_of(counted.lower(jnp.ones(4)).compile())
    message, _ = agent.build_report()
    [sent] = [p for p in message.report.programs if p.name == "jit_counted"]
    assert tuple(sent.program_ids) == record.program_ids


class _Module:
    def __init__(self, module_id: int) -> None:
        self.module_id = module_id

    def to_string(self) -> str:
        return f"HloModule m{self.module_id}"

    def as_serialized_hlo_module_proto(self) -> bytes:
        return b"\x28" + bytes([self.module_id])  # field 5, one varint byte (< 128)


class _Executable:
    def __init__(self, *ids: int) -> None:
        self.modules = [_Module(i) for i in ids]

    def hlo_modules(self) -> list[_Module]:
        return self.modules


def test_a_recompile_adds_ids_and_the_list_stays_bounded(agent: Agent) -> None:
    @jax.jit
    def again(x: jax.Array) -> jax.Array:
        return x - 1.0

    again(jnp.ones(4)).block_until_ready()
    agent.hlo.drain()
    [record] = [p for p in agent.compiles.programs() if p.name == "jit_again"]
    first = record.program_ids
    # later executables of the same program, as the compile hook hands them over
    agent.hlo.offer(record.fingerprint, _Executable(101))
    agent.hlo.offer(record.fingerprint, _Executable(101, 102))  # MPMD: two modules
    agent.hlo.drain()
    [record] = [p for p in agent.compiles.programs() if p.name == "jit_again"]
    assert record.program_ids == (*first, 101, 102)
    for i in range(20, 60):
        agent.hlo.offer(record.fingerprint, _Executable(i))
    agent.hlo.drain(limit=100)
    [record] = [p for p in agent.compiles.programs() if p.name == "jit_again"]
    assert len(record.program_ids) == MAX_PROGRAM_IDS and record.program_ids[-1] == 59
