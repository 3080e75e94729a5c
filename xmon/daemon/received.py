"""What the daemon keeps of what a job's agent sent: model objects the intake made once.

The intake (xmon.daemon.intake.convert) reads each hello and report where it arrives, cleans it
(labels bounded, non-finite numbers dropped, strings and lists cut to the job's bounds) and
hands the job state (xmon.daemon.jobs) these frozen dataclasses; the job builder, the findings
and the profiler read them and never a protobuf message.

Each object that stays with a job carries ``estimated_bytes``, what it holds in the daemon's
memory, which the job's budget counts (xmon.daemon.bounds): a fixed size per object, measured
with tracemalloc on CPython 3.11 and 3.13 and rounded up (``tests/unit/daemon/
test_intake_convert.py`` checks it stays above what tracemalloc sees), plus each string's own
size (``sys.getsizeof``). It is deterministic and needs no walk of the objects: the conversion
adds it up as it makes them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from xmon.findings.oom import OomEvent
from xmon.findings.recompiles import FunctionCompiles
from xmon.model import (
    AgentHealth,
    Capability,
    CompileEvent,
    CompileStats,
    DeviceInfo,
    FleetIdentity,
    Program,
)

MAX_LABEL_CHARS = 128
MAX_ARGV = 32  # a job's arguments kept (and shown)
STEP_WINDOW = 256  # step durations a job keeps for percentiles
RECENT_COMPILES = 32  # compile events a job keeps

# Estimated bytes (see the module's docstring). Strings are counted apart, by their size.
HELLO_BYTES = 1200  # a Hello, its numbers and its argv tuple (measured: ~1,000)
# a ReportParts and what every report has: its counters, the process's identity and the
# account with its buckets (measured: 1,300 without the identity and account, 2,200 with)
PARTS_BYTES = 4096
READING_BYTES = 300  # one device's MemoryReading and its place in the parts (measured: 180)
STAT_BYTES = 80  # each stat of a reading: its dict slot and number (measured: 56-68)
CAPABILITY_BYTES = 120  # a Capability (measured: 95)
FUNCTION_BYTES = 400  # a FunctionCompiles (measured: 330 with 4 changes and 32 arguments,
ITEM_BYTES = 8  # and 8 more for each change and argument)
STALL_BYTES = 120  # a Stall (measured: 56)
CONDITIONAL_BYTES = 300  # a program's Conditional and its branches tuple (measured: ~130)
BRANCH_BYTES = 250  # each Branch and its ops tuple (measured: ~170 with two ops)


def clean_label(value: str) -> str:
    """Client-supplied names become label values and paths: bound them, drop control chars."""
    value = value[:MAX_LABEL_CHARS]
    if not value.isprintable():  # rare: the whole string is checked in C first
        value = "".join(ch if ch.isprintable() else "?" for ch in value)
    return value or "unnamed"


def clean_text(value: str) -> str:
    """``clean_label`` for a field where empty means unknown (kept empty)."""
    return clean_label(value) if value else ""


text_bytes = sys.getsizeof  # what a string kept holds: its object's size


def capabilities_bytes(capabilities: tuple[Capability, ...]) -> int:
    return sum(
        CAPABILITY_BYTES + text_bytes(c.name) + text_bytes(c.unavailable_reason)
        for c in capabilities
    )


def functions_bytes(functions: tuple[FunctionCompiles, ...]) -> int:
    return sum(
        FUNCTION_BYTES
        + ITEM_BYTES * (len(f.changes) + len(f.arguments))
        + text_bytes(f.name)
        + text_bytes(f.jax_explanation)
        + sum(map(text_bytes, f.changes))
        + sum(map(text_bytes, f.arguments))
        for f in functions
    )


def conditionals_bytes(program: Program) -> int:
    """What a program's conditionals hold beside it (its own size is PROGRAM_BYTES)."""
    return sum(
        CONDITIONAL_BYTES
        + text_bytes(c.name)
        + sum(BRANCH_BYTES + sum(map(text_bytes, b.ops)) for b in c.branches)
        for c in program.conditionals
    )


def stall_bytes(stall: Stall | None) -> int:
    if stall is None:
        return 0
    return STALL_BYTES + sum(map(text_bytes, (stall.stacks, stall.waits_in, stall.in_program)))


@dataclass(frozen=True, slots=True)
class Hello:
    """Who the job is, as its hello says for its stream's life (xmon.proto ``AgentHello``),
    cleaned: names are labels (at most 128 printable characters), at most ``MAX_ARGV``
    arguments. ``devices`` are the ones it announced (at most ``devices_per_job``); the job
    state takes them and keeps the hello without them."""

    job_name: str
    pid: int
    hostname: str  # "" where the agent sent none
    platform: str  # "" before the job initialised a backend
    jax_version: str
    jaxlib_version: str
    process_index: int
    process_count: int  # at least 1
    argv: tuple[str, ...]
    started_at: float  # wall clock of attach
    devices: tuple[DeviceInfo, ...] = ()
    estimated_bytes: int = 0  # without the devices, which the job counts as it takes them


@dataclass(frozen=True, slots=True)
class StepCounters:
    """The job's marked steps (xmon.proto ``StepCounters``), cumulative; the declared work
    per step and the open step's length are None where the job declared or has none."""

    steps_total: int = 0
    step_seconds_total: float = 0.0
    flops_per_step: float | None = None  # model FLOPs per step the user declared (MFU)
    bytes_per_step: float | None = None
    tokens_per_step: float | None = None
    steps_begun_total: int = 0  # finished steps plus the ones still open
    open_step_seconds: float | None = None


NO_STEPS = StepCounters()


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """One device's allocator stats in the latest report (xmon.proto ``DeviceMemorySample``):
    at most ``stats_per_device`` stats, none named past the label bound; the job builder makes
    the snapshot's ``DeviceMemory`` of it (xmon.daemon.job_builder)."""

    stats: Mapping[str, int]
    live_array_bytes: int | None = None
    live_array_read_at: float | None = None  # wall clock of the live-array reading


@dataclass(frozen=True, slots=True)
class Stall:
    """The job's stall while no step has finished for long (xmon.proto ``StallReport``): its
    threads' stacks, where its step thread waits ("jax", "host" or "unknown") and the program
    it is in, each string at most 64 KiB."""

    stacks: str
    waits_in: str
    in_program: str


@dataclass(frozen=True, slots=True)
class GoodputAccount:
    """Where the process's wall time went up to the report (xmon.proto ``GoodputAccount``),
    by the account's buckets (xmon.goodput.account.BUCKETS) only."""

    process_started_at: float
    as_of: float
    seconds: Mapping[str, float]
    steps_marked: bool
    first_step_at: float  # 0 before a marked step began
    last_step_at: float  # 0 before a marked step ended


@dataclass(frozen=True, slots=True)
class ReportParts:
    """What the job state keeps of a job's latest report until the next one: its counters,
    what the agent can do, the recompiled functions, the stall, the process's identity, its
    wall-time account and each device's memory (by device id)."""

    steps: StepCounters = NO_STEPS
    compile: CompileStats = field(default_factory=CompileStats)  # with no recent events
    agent: AgentHealth = field(default_factory=AgentHealth)
    capabilities: tuple[Capability, ...] = ()
    functions: tuple[FunctionCompiles, ...] = ()  # at most 16
    stall: Stall | None = None
    fleet: FleetIdentity | None = None  # set once the job initialised a backend
    goodput: GoodputAccount | None = None
    memory: Mapping[int, MemoryReading] = field(default_factory=dict)
    estimated_bytes: int = PARTS_BYTES


@dataclass(frozen=True, slots=True)
class Report:
    """A report as the job state takes it: the parts it keeps, and what it takes once (the
    platform, devices it did not know, programs) or into its windows (step times, compiles)."""

    parts: ReportParts
    platform: str = ""  # "" where the report names none
    devices: tuple[DeviceInfo, ...] = ()  # only those the job did not know, at most the bound
    recent_step_seconds: tuple[float, ...] = ()
    compile_events: tuple[CompileEvent, ...] = ()
    programs: tuple[Program, ...] = ()  # at most programs_per_job


@dataclass(frozen=True, slots=True)
class OomReport:
    """A job's out-of-memory report: the finding's event (the sink sets when it arrived and
    the files it wrote), the report as its JSON file holds it, and the memory profile."""

    event: OomEvent
    record: Mapping[str, object]  # xmon.proto OomReport's JSON form, without the profile
    memory_profile: bytes = b""
