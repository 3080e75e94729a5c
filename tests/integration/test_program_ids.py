"""HLO module ids: the agent reads them from real executables, and they are the ``program_id``
that jax's profiler writes into a real trace (counted by the daemon's reader)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import xmon
from xmon.agent.compiles import MAX_PROGRAM_IDS
from xmon.agent.core import Agent
from xmon.agent.hlo_store import module_ids, serialized_modules


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """An attached agent with no daemon behind its socket."""
    attached = xmon.attach(job_name="ids", period=60, socket_path=tmp_path / "absent.sock")
    yield attached
    xmon.detach()


def _ids_of(compiled: jax.stages.Compiled) -> tuple[int, ...]:
    executable = compiled.runtime_executable()
    assert executable is not None
    return module_ids(serialized_modules(list(executable.hlo_modules())))


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
