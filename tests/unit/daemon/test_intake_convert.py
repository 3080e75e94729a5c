"""What agents send, made model objects once at the daemon's intake (xmon.daemon.intake.convert):
cleaned and cut to the job's bounds there, so that nothing past it reads a protobuf message."""

from __future__ import annotations

import dataclasses
import gc
import math
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from xmon.daemon.bounds import Limits, StateBudget
from xmon.daemon.intake.convert import (
    MAX_BRANCH_OPS,
    MAX_BRANCHES,
    MAX_CONDITIONALS,
    hello_of,
    oom_of,
    program_of,
    report_of,
    sample_of,
)
from xmon.daemon.intake.sanitize import scrub
from xmon.daemon.received import MemoryReading, StepCounters, conditionals_bytes
from xmon.execution.samples import MAX_STEP_BEGINS, ExecutionSample
from xmon.findings.recompiles import FunctionCompiles
from xmon.goodput.account import BUCKETS
from xmon.model import AgentHealth, Capability, CompileStats, FleetIdentity
from xmon.wire.proto import xmon_pb2


def test_an_execution_sample_keeps_its_numbers_and_bytes() -> None:
    message = xmon_pb2.ExecutionSample(
        started_at=1.7e9, duration_seconds=0.2, xspace=b"space", step_begin_seconds=[0.05, 0.1],
        steps_marked=True, anchor_seconds=0.001,
    )  # fmt: skip
    assert sample_of(message) == ExecutionSample(
        1.7e9, 0.2, b"space", (0.05, 0.1), steps_marked=True, anchor_seconds=0.001
    )
    assert sample_of(xmon_pb2.ExecutionSample()).anchor_seconds is None  # unset: unknown


def test_a_sample_s_step_begins_are_taken_no_further_than_its_refusal_needs() -> None:
    message = xmon_pb2.ExecutionSample(step_begin_seconds=[0.0] * 100_000)
    assert len(sample_of(message).step_begin_seconds) == MAX_STEP_BEGINS + 1


# --- reports ----------------------------------------------------------------------------------


def full_report(i: int = 0, devices: int = 2, stats: int = 11, key: str = "") -> Any:
    """A report with every part the daemon keeps set, its strings ``i``'s own."""
    report = xmon_pb2.AgentReport(wall_time=1.7e9 + i, platform="gpu")
    for d in range(devices):
        report.memory.add(
            device_id=d, stats={f"{key}stat{k}_{i}": 10**12 + k for k in range(stats)},
            live_array_bytes=10**10, live_array_read_at=1.7e9,
        )  # fmt: skip
    report.steps.CopyFrom(
        xmon_pb2.StepCounters(
            steps_total=10**6 + i, step_seconds_total=1e4, recent_step_seconds=[0.01, 0.02],
            flops_per_step=1e15, bytes_per_step=1e12, tokens_per_step=1e6,
            steps_begun_total=10**6 + i + 1, open_step_seconds=0.5,
        )
    )  # fmt: skip
    report.compile.CopyFrom(
        xmon_pb2.CompileCounters(
            compiles_total=5001, recompiles_total=4002, backend_compile_seconds_total=45.5,
            trace_seconds_total=3.25, lowering_seconds_total=2.125, cache_requests_total=9003,
            cache_hits_total=8004, cache_misses_total=1005, steady_recompiles_total=306,
            eager_compiles_total=707,
        )
    )  # fmt: skip
    report.agent.CopyFrom(
        xmon_pb2.AgentCounters(
            reports_sent_total=10**6 + i, reports_dropped_total=1001, events_dropped_total=1002,
            reconnects_total=1003, overhead_seconds_total=0.5, ledger_samples_total=1004,
            ledger_samples_skipped_total=1005, ledger_samples_busy_total=1006,
            ledger_next_sample_at=1.7e9 + i + 5,
        )
    )  # fmt: skip
    report.capabilities.extend(
        xmon_pb2.Capability(name=f"cap{k}_{i}", unavailable_reason=f"why {k} {i}" * (k % 2))
        for k in range(7)
    )
    report.process.CopyFrom(
        xmon_pb2.ProcessIdentity(
            job_key=f"10.0.0.1:1234/4 {i}", distributed=True, process_index=1, process_count=4,
            slice_index=0, worker=f"w{i}",
        )
    )  # fmt: skip
    report.goodput.CopyFrom(
        xmon_pb2.GoodputAccount(
            process_started_at=1.7e9, as_of=1.7e9 + 100, seconds=dict.fromkeys(BUCKETS, 1.5),
            steps_marked=True, first_step_at=1.7e9 + 1, last_step_at=1.7e9 + 99,
        )
    )  # fmt: skip
    for f in range(3):
        report.compile_functions.add(
            name=f"jit_f{f}_{i}", compiles_total=10 + f, steady_recompiles_total=5,
            first_compiled_at=1.7e9, last_compiled_at=1.7e9 + f, changes=[f"shape: arg {f} {i}"],
            arguments=[f"x {i}", f"y {i}"], jax_explanation=f"a new shape {i}",
        )  # fmt: skip
    report.stall.CopyFrom(
        xmon_pb2.StallReport(
            seconds_since_step=60, stacks=f"Thread MainThread ({i}):\n", step_thread_waits_in="jax",
            step_thread_in_program=f"jit_step{i}",
        )
    )  # fmt: skip
    report.compile_events.add(fun_name="jit_step", duration_seconds=0.5, wall_time=1.7e9)
    report.programs.add(fingerprint=f"{i:064x}", name="jit_step", flops=1e9, compiled_at=1.7e9)
    report.devices.add(id=0, platform="gpu", device_kind="NVIDIA H100")
    return report


def test_every_counter_a_report_carries_reaches_the_model() -> None:
    parts = report_of(full_report(), StateBudget()).parts
    assert parts.steps == StepCounters(10**6, 1e4, 1e15, 1e12, 1e6, 10**6 + 1, 0.5)
    assert parts.compile == CompileStats(
        compiles_total=5001, recompiles_total=4002, backend_compile_seconds_total=45.5,
        trace_seconds_total=3.25, lowering_seconds_total=2.125, cache_requests_total=9003,
        cache_hits_total=8004, cache_misses_total=1005, steady_recompiles_total=306,
        eager_compiles_total=707,
    )  # fmt: skip
    assert parts.agent == AgentHealth(10**6, 1001, 1002, 1003, 0.5, 1004, 1005, 1006, 1.7e9 + 5)
    assert parts.fleet == FleetIdentity("10.0.0.1:1234/4 0", 1, 4, 0, "w0", True, False)
    assert parts.goodput is not None and parts.goodput.seconds == dict.fromkeys(BUCKETS, 1.5)
    assert parts.goodput.last_step_at == 1.7e9 + 99
    assert parts.memory[1] == MemoryReading(
        {f"stat{k}_0": 10**12 + k for k in range(11)}, 10**10, 1.7e9
    )
    assert parts.capabilities[1] == Capability("cap1_0", "why 1 0")
    assert parts.functions[0] == FunctionCompiles(
        "jit_f0_0", 10, 5, first_compiled_at=1.7e9, last_compiled_at=1.7e9,
        changes=("shape: arg 0 0",), arguments=("x 0", "y 0"), jax_explanation="a new shape 0",
    )  # fmt: skip
    assert parts.stall is not None and parts.stall.waits_in == "jax"
    # every field of the counters' messages is read: a field added to the proto must be too
    for message, model in [
        (xmon_pb2.StepCounters, StepCounters),
        (xmon_pb2.CompileCounters, CompileStats),
        (xmon_pb2.AgentCounters, AgentHealth),
        (xmon_pb2.ProcessIdentity, FleetIdentity),
    ]:
        read = {f.name for f in dataclasses.fields(model)}
        assert {f.name for f in message.DESCRIPTOR.fields} - {"recent_step_seconds"} <= read


def _floats(message: Message) -> Iterator[tuple[Message, FieldDescriptor]]:
    """Every float field set in ``message`` and the messages inside it."""
    for field, value in message.ListFields():
        if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            yield message, field
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.GetOptions().map_entry
        ):
            for sub in value if field.is_repeated else [value]:
                yield from _floats(sub)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -5.0, 2e10])
def test_a_report_s_floats_are_read_as_the_scrub_leaves_them(bad: float) -> None:
    """Each float the conversion reads is checked as it is read; the result is the one of a
    report scrubbed first (xmon.daemon.intake.sanitize): a non-finite number unset, and a wall
    time outside 1970..2286 too."""
    report = full_report()
    for message, field in list(_floats(report)):
        if field.is_repeated:
            getattr(message, field.name).append(bad)
        else:
            setattr(message, field.name, bad)
    report.goodput.seconds["steps"] = bad
    scrubbed = type(report).FromString(report.SerializeToString())
    assert scrub(scrubbed) > 0
    assert report_of(report, StateBudget()) == report_of(scrubbed, StateBudget())


def test_repeated_capabilities_functions_and_identity_are_the_previous_objects() -> None:
    budget = StateBudget()
    first = report_of(full_report(), budget).parts
    again = report_of(full_report(), budget, before=first).parts
    assert again.capabilities is first.capabilities and again.functions is first.functions
    assert again.fleet is first.fleet
    changed = full_report()
    changed.compile_functions[2].compiles_total += 1
    changed.capabilities[0].unavailable_reason = "lost"
    later = report_of(changed, budget, before=first).parts
    assert later.functions is not first.functions and later.functions[2].compiles_total == 13
    assert later.capabilities[0] == Capability("cap0_0", "lost")
    dirty = full_report()
    dirty.capabilities[0].name = "cap\x07"  # cleaned: never equal to what it was sent as
    assert report_of(dirty, budget, before=first).parts.capabilities[0].name == "cap?"


def test_lists_past_the_job_s_bounds_are_cut_before_they_are_converted() -> None:
    budget = StateBudget(Limits(devices_per_job=4, programs_per_job=10, stats_per_device=3))
    report = full_report(devices=6, stats=5)
    report.programs.extend(xmon_pb2.ProgramInfo(fingerprint=f"p{n}") for n in range(20))
    report.compile_functions.extend(xmon_pb2.FunctionCompiles(name=f"f{n}") for n in range(20))
    converted = report_of(report, budget, known_devices={0})
    assert len(converted.programs) == 10 and list(converted.parts.memory) == [0, 1, 2, 3]
    assert len(converted.parts.functions) == 16
    assert converted.devices == ()  # the one it names is known
    assert [len(r.stats) for r in converted.parts.memory.values()] == [3] * 4
    assert budget.refused == {"devices": 2, "programs": 11, "memory_stats": 4 * 2}


def test_a_hello_is_cleaned_and_its_devices_cut() -> None:
    budget = StateBudget(Limits(devices_per_job=2))
    hello = hello_of(
        xmon_pb2.AgentHello(
            job_name="train\x07", pid=7, argv=["python"] * 40 + [""], started_at=math.inf,
            devices=[xmon_pb2.DeviceInfo(id=i) for i in range(5)], process_count=0,
        ),
        budget,
    )  # fmt: skip
    assert (hello.job_name, hello.pid, hello.hostname, hello.started_at) == ("train?", 7, "", 0.0)
    assert len(hello.argv) == 32 and hello.process_count == 1
    assert [d.id for d in hello.devices] == [0, 1] and budget.refused == {"devices": 3}


def test_an_out_of_memory_report_becomes_the_finding_s_event_and_its_file() -> None:
    message = xmon_pb2.OomReport(wall_time=1.7e9, error="RESOURCE_EXHAUSTED", seen_by="step")
    message.largest_arrays.add(shape=[4, 4], dtype="float32", nbytes=64).device_bytes[0] = 64
    message.memory.add(device_id=0, stats={"bytes_limit": 100})
    message.program.CopyFrom(xmon_pb2.ProgramInfo(name="jit_step", temp_bytes=50))
    message.memory_profile = b"pprof"
    oom = oom_of(message)
    assert oom.event.arrays[0].device_bytes == ((0, 64),) and oom.event.device_limit_bytes == 100
    assert oom.event.program is not None and oom.event.program.temp_bytes == 50
    assert oom.memory_profile == b"pprof" and "memory_profile" not in oom.record
    assert oom.record["error"] == "RESOURCE_EXHAUSTED"


# --- what the kept objects hold ----------------------------------------------------------------


def _held(make: Callable[[int], Any], count: int) -> tuple[float, list[Any]]:
    """Bytes each object ``make`` returns holds, by tracemalloc. One is made first, unmeasured:
    the first conversion in a process allocates what every later one shares (a hello measured
    4.6 KB first on Python 3.11, 2.8 KB after)."""
    make(0)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make(i) for i in range(count)]
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / count, kept
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("devices", "stats", "key"),
    [(0, 0, ""), (2, 11, ""), (8, 2, ""), (16, 64, "k" * 100)],
)
def test_the_estimate_of_a_report_s_parts_covers_what_they_hold(
    devices: int, stats: int, key: str
) -> None:
    budget = StateBudget(Limits(stats_per_device=64))
    messages = [full_report(i, devices, stats, key) for i in range(40)]
    size, kept = _held(lambda i: report_of(messages[i], budget).parts, 40)
    assert size <= kept[0].estimated_bytes <= 2.5 * size + 4096


def test_the_estimate_of_a_hello_covers_what_it_holds() -> None:
    budget = StateBudget()
    messages = [
        xmon_pb2.AgentHello(
            job_name=f"job{i}" + "j" * 100, pid=1000 + i, hostname=f"h{i}", platform="gpu",
            jax_version=f"0.12.{i}", jaxlib_version=f"0.12.{i}",
            argv=[f"--arg{k}={i}" for k in range(32)], started_at=1.7e9,
        )
        for i in range(40)
    ]  # fmt: skip
    size, kept = _held(lambda i: hello_of(messages[i], budget), 40)
    assert size <= kept[0].estimated_bytes <= 2 * size


# --- a program's conditionals ------------------------------------------------------------------


def _program(conditionals: int = 1, branches: int = 2, ops: int = 2, **numbers: float) -> Any:
    program = xmon_pb2.ProgramInfo(fingerprint="p", name="jit_step", flops_upper_bound=True)
    for c in range(conditionals):
        conditional = program.conditionals.add(
            name=f"cond.{c}", counted_flops=numbers.get("counted_flops", 9.0),
            counted_bytes_accessed=8.0,
        )  # fmt: skip
        for b in range(branches):
            conditional.branches.add(
                flops=numbers.get("flops", float(b + 1)), bytes_accessed=float(b),
                ops=[f"fusion.{c}.{b}.{k}" + "\x00" for k in range(ops)],
            )  # fmt: skip
    return program


def test_a_program_s_conditionals_are_kept_with_their_names_cleaned() -> None:
    (conditional,) = program_of(_program()).conditionals
    assert conditional.name == "cond.0" and conditional.counted_flops == 9.0
    assert [b.flops for b in conditional.branches] == [1.0, 2.0]
    assert conditional.branches[1].ops == ("fusion.0.1.0?", "fusion.0.1.1?")
    # only a program the agent said is an upper bound has its branches counted
    lower = _program()
    lower.flops_upper_bound = False
    assert program_of(lower).conditionals == ()


@pytest.mark.parametrize(
    "bad",
    [
        {"conditionals": MAX_CONDITIONALS + 1},
        {"branches": MAX_BRANCHES + 1},
        {"branches": 1},
        {"ops": MAX_BRANCH_OPS + 1},
        {"flops": math.nan},
        {"flops": -1.0},
        {"counted_flops": math.inf},
    ],
)
def test_conditionals_past_a_bound_or_not_a_cost_are_all_left_out(bad: dict[str, Any]) -> None:
    """One conditional left out would make the others' count look exact: none is kept, and
    the program's figures stay the upper bound they are."""
    program = program_of(_program(**bad))
    assert program.conditionals == () and program.flops_upper_bound


def test_the_estimate_of_a_program_s_conditionals_covers_what_they_hold() -> None:
    messages = [_program(MAX_CONDITIONALS, 8, MAX_BRANCH_OPS) for _ in range(20)]
    for i, message in enumerate(messages):
        message.fingerprint = f"p{i}"
    size, kept = _held(lambda i: program_of(messages[i]).conditionals, 20)
    estimate = conditionals_bytes(program_of(messages[0]))
    assert size <= estimate <= 2.5 * size
