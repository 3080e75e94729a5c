"""Per-program FLOPs of real JAX programs with while loops, against truths found without xmon:
the cost analysis of an unrolled twin and analytic matmul counts (tests/fidelity/patterns.py).
XLA's own figure counts each loop body once; xmon's must be within 1 % of the truth."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import patterns
import pytest
from jax import lax

import xmon
from xmon.agent.core import Agent
from xmon.agent.hlo_store import serialized_modules
from xmon.agent.programs import analyse_loops, describe_executable, with_loop_cost
from xmon.model import Program

from support.procs import Daemon, json_written, start_job, wait_for

COUNTED = [name for name in patterns.BUILDERS if name != "data_dependent_while"]


def xmon_program(pattern: patterns.Pattern) -> Program:
    """The record the agent makes of the compiled program: the compile hook's pass, then the
    agent thread's pass over its HLO module protos."""
    executable = pattern.fn.lower(*pattern.args).compile().runtime_executable()
    record = describe_executable(None, executable)
    modules = serialized_modules(list(executable.hlo_modules()))
    return with_loop_cost(record, analyse_loops(executable, modules))


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[patterns.Pattern, Program]]:
    assert len(jax.devices()) == patterns.DEVICES, "conftest asks for 4 CPU devices"
    out = {}
    for name, build in patterns.BUILDERS.items():
        pattern = build()
        out[name] = (pattern, xmon_program(pattern))
    return out


@pytest.mark.parametrize("name", COUNTED)
def test_loop_flops_match_the_unrolled_twin_and_the_matmul_count(
    built: dict[str, tuple[patterns.Pattern, Program]], name: str
) -> None:
    pattern, program = built[name]
    assert pattern.truth is not None and program.flops is not None
    assert program.flops == pytest.approx(pattern.truth, rel=0.01)
    assert program.flops == pytest.approx(pattern.matmul_flops, rel=0.01)
    assert program.flops_xla is not None and program.flops_xla < 0.5 * pattern.truth, (
        "XLA counts each body once"
    )
    assert program.loops >= 1 and program.loops_unknown_trip_count == 0
    assert not program.flops_lower_bound
    assert program.bytes_accessed is not None and program.bytes_accessed_xla is not None
    assert program.bytes_accessed > program.bytes_accessed_xla
    assert program.transcendentals is not None and program.transcendentals > 0


@pytest.mark.parametrize("name", list(patterns.BUILDERS))
def test_the_module_proto_and_the_text_give_the_same_figures(name: str) -> None:
    """The agent reads each program's structure from its HloModuleProto, no longer from the
    printed text: on every pattern both give the same loops, trip counts and XLA-costed
    figures (so the numbers of earlier releases stand)."""
    from xmon.agent.programs import xla_cost_function
    from xmon.execution.loop_cost import loop_cost, loop_cost_of_protos

    pattern = patterns.BUILDERS[name]()
    executable = pattern.fn.lower(*pattern.args).compile().runtime_executable()
    modules = list(executable.hlo_modules())
    cost = xla_cost_function(executable)
    from_proto = loop_cost_of_protos(serialized_modules(modules), cost)
    from_text = loop_cost("\n".join(m.to_string() for m in modules), cost)
    assert from_proto == from_text
    assert from_proto.loops and from_proto.reason is None


def _flops_of(fn: Any, *args: Any) -> float:
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"])


def test_a_conditional_is_costed_at_its_costliest_branch_and_marked_an_upper_bound() -> None:
    """lax.cond / lax.switch: XLA counts the costliest branch whichever runs. xmon's figure is
    that one, marked an upper bound, and holds for every branch the data may take; branches
    that do the same work stay exact. Inside a scan, the bound is weighed per trip."""
    x, w = patterns._operands()

    def heavy(v: jax.Array) -> jax.Array:
        return jnp.tanh((v @ w) @ w)

    def light(v: jax.Array) -> jax.Array:
        return v * 2.0

    def step(v: jax.Array, k: jax.Array) -> jax.Array:
        return lax.cond(k > 0, heavy, light, v)

    def scanned(v: jax.Array, ks: jax.Array) -> jax.Array:
        return lax.scan(lambda c, k: (step(c, k), None), v, ks)[0]

    def even(v: jax.Array, k: jax.Array) -> jax.Array:
        return lax.switch(k % 2, [lambda u: jnp.tanh(u @ w), lambda u: jnp.sin(u @ w)], v)

    k = jnp.int32(1)
    cond = xmon_program(patterns.Pattern("cond", None, jax.jit(step), (x, k), 0.0))
    costliest, cheapest = _flops_of(heavy, x), _flops_of(light, x)
    assert cond.flops_upper_bound and not cond.flops_lower_bound
    assert cond.flops == pytest.approx(costliest, rel=0.01) and cond.flops >= cheapest
    ks = jnp.arange(patterns.TRIPS) % 2  # the branch taken changes with the data
    looped = xmon_program(patterns.Pattern("scan", None, jax.jit(scanned), (x, ks), 0.0))
    assert looped.flops_upper_bound and looped.loops == 1
    assert looped.flops == pytest.approx(patterns.TRIPS * costliest, rel=0.02)
    same = xmon_program(patterns.Pattern("even", None, jax.jit(even), (x, k), 0.0))
    assert not same.flops_upper_bound and not same.flops_lower_bound
    assert same.flops == pytest.approx(patterns.matmul(patterns.BATCH, patterns.WIDTH,
                                                       patterns.WIDTH), rel=0.02)  # fmt: skip


def test_nested_loops_are_both_counted(built: dict[str, tuple[patterns.Pattern, Program]]) -> None:
    assert built["nested_scans"][1].loops == 2


def test_data_dependent_trip_count_is_a_lower_bound(
    built: dict[str, tuple[patterns.Pattern, Program]],
) -> None:
    pattern, program = built["data_dependent_while"]
    assert pattern.lower_bound and pattern.truth is not None
    assert program.flops_lower_bound
    assert (program.loops, program.loops_unknown_trip_count) == (1, 1)
    assert program.flops == program.flops_xla, "the body once: nothing guessed"
    assert program.flops is not None and program.flops < pattern.truth


# --- through the attached agent ---------------------------------------------------------------


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    attached = xmon.attach(job_name="fidelity", period=60, socket_path=tmp_path / "absent.sock")
    yield attached
    xmon.detach()


def test_the_agent_counts_loops_on_its_own_thread(agent: Agent) -> None:
    pattern = patterns.scan_matmul()

    def scanned(x: jax.Array, w: jax.Array) -> jax.Array:
        return pattern.fn(x, w)

    jax.jit(scanned).lower(*pattern.args).compile()
    [first] = [p for p in agent.compiles.programs() if p.name == "jit_scanned"]
    assert first.flops == first.flops_xla and first.flops_lower_bound, "provisional until read"
    agent.hlo.drain()  # what the agent thread does before each report
    [record] = [p for p in agent.compiles.unsent_programs() if p.name == "jit_scanned"]
    assert record.flops == pytest.approx(pattern.truth, rel=0.01)
    assert (record.loops, record.flops_lower_bound) == (1, False)


# --- end to end: a job, the daemon, /metrics ----------------------------------------------------

JOB = r"""
import json, os, pathlib, time
import jax, jax.numpy as jnp
from jax import lax

out = pathlib.Path(os.environ["JOB_OUT"])
stop = pathlib.Path(os.environ["JOB_STOP"])
trips, b, d = 40, 8, 128

@jax.jit
def scanned(x, w):
    return lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=trips)[0]

def unrolled(x, w):
    for _ in range(trips):
        x = jnp.tanh(x @ w)
    return x

x = jnp.ones((b, d)); w = jnp.full((d, d), 0.01)
scanned(x, w).block_until_ready()
twin = jax.jit(unrolled).lower(x, w).compile().cost_analysis()["flops"]
out.write_text(json.dumps({"twin": twin, "matmul": trips * 2 * b * d * d}))
while not stop.exists():
    scanned(x, w).block_until_ready()
    time.sleep(0.05)
"""


def _value(text: str, name: str, program: str) -> float | None:
    pattern = rf'^{name}\{{[^}}]*program="{program}"[^}}]*\}} (\S+)$'
    match = re.search(pattern, text, re.M)
    return float(match[1]) if match else None


@pytest.mark.e2e
def test_daemon_metrics_show_loop_aware_flops(tmp_path: Path, daemon: Daemon) -> None:
    out, stop = tmp_path / "out.json", tmp_path / "stop"
    job = start_job(tmp_path, daemon.socket_path, JOB, "loops", JOB_OUT=str(out),
                    JOB_STOP=str(stop))  # fmt: skip
    try:

        def written() -> Any:
            assert job.alive(), job.log()
            return json_written(out)

        truth = wait_for(written, 120, "the job to compile and write its truth")

        def scraped() -> str | None:
            text = daemon.scrape()
            return text if _value(text, "xmon_job_program_flops", "jit_scanned") else None

        text = wait_for(scraped, 60, "the program's FLOPs on /metrics")
        flops = _value(text, "xmon_job_program_flops", "jit_scanned")
        assert flops == pytest.approx(truth["twin"], rel=0.01)
        assert flops == pytest.approx(truth["matmul"], rel=0.01)
        flops_xla = _value(text, "xmon_job_program_flops_xla", "jit_scanned")
        assert flops_xla is not None and flops_xla < truth["twin"] / 10
        assert _value(text, "xmon_job_program_loops", "jit_scanned") == 1
        assert _value(text, "xmon_job_program_flops_lower_bound", "jit_scanned") == 0
    finally:
        stop.touch()
        if job.popen.poll() is None:
            try:
                job.popen.wait(60)
            finally:
                job.stop()


def test_a_program_dropped_unread_keeps_xlas_figures_unflagged() -> None:
    from xmon.agent.compiles import CompileRecorder
    from xmon.agent.hlo_store import HloStore

    recorder, store = CompileRecorder(), HloStore(max_pending=1)
    recorder.executable_listener = store.offer
    store.cost_listener = recorder.add_loop_cost
    first, second = patterns.scan_matmul(), patterns.fori_loop_matmul()
    for pattern in (first, second):  # the second pushes the first out of the queue
        recorder.on_executable(None, pattern.fn.lower(*pattern.args).compile().runtime_executable())
    dropped, pending = sorted(recorder.programs(), key=lambda p: p.compiled_at or 0.0)
    assert store.dropped == 1 and not dropped.flops_lower_bound and dropped.loops == 0
    assert pending.flops_lower_bound and store.drain() == 1
    [counted] = [p for p in recorder.programs() if p.fingerprint == pending.fingerprint]
    assert counted.flops == pytest.approx(second.truth, rel=0.01) and counted.loops == 1
