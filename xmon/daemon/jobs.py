"""What the daemon knows about each attached job between its reports.

Agents send cumulative counters plus what is new since their last report; this module keeps
the per-job state (bounded: xmon.daemon.bounds) and converts what agents send into the
snapshot model's parts. xmon.daemon.job_builder turns the state into a ``model.Job``.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message

from xmon.analysis import derived
from xmon.daemon.bounds import DEVICE_BYTES, JOB_BASE_BYTES, PROGRAM_BYTES, StateBudget
from xmon.daemon.intake.report_strings import cut_report_strings
from xmon.daemon.intake.sanitize import scrub
from xmon.execution.ledger import JobLedger
from xmon.goodput.account import BUCKETS as ACCOUNT_BUCKETS
from xmon.goodput.split import GoodputSplit
from xmon.model import (
    CompileEvent,
    DeviceInfo,
    DeviceMemory,
    Program,
)
from xmon.wire.proto import xmon_pb2
from xmon.wire.protocol import optional_field_names

_Message = TypeVar("_Message", bound=Message)

STEP_WINDOW = 256  # step durations kept for percentiles
RECENT_COMPILES = 32
MAX_PROGRAM_IDS = 64  # module ids kept per program (agents send at most 16)
MAX_LABEL_CHARS = 128

_MEMORY_KEYS = frozenset((
    "bytes_in_use", "peak_bytes_in_use", "bytes_limit", "bytes_reserved",
    "peak_bytes_reserved", "bytes_reservable_limit", "largest_free_block_bytes",
    "largest_alloc_size", "num_allocs", "pool_bytes", "peak_pool_bytes",
))  # fmt: skip
_PROGRAM_OPTIONAL = optional_field_names(xmon_pb2.ProgramInfo)


def clean_label(value: str) -> str:
    """Client-supplied names become label values and paths: bound them, drop control chars."""
    value = value[:MAX_LABEL_CHARS]
    if not value.isprintable():  # rare: the whole string is checked in C first
        value = "".join(ch if ch.isprintable() else "?" for ch in value)
    return value or "unnamed"


def clean_text(value: str) -> str:
    """``clean_label`` for a field where empty means unknown (kept empty)."""
    return clean_label(value) if value else ""


@dataclass
class JobState:
    hello: xmon_pb2.AgentHello
    connected_at: float
    last_report_at: float = 0.0
    last_report_monotonic: float = 0.0
    report: xmon_pb2.AgentReport | None = None
    devices: dict[int, DeviceInfo] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)
    steps_window: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))
    compile_events: deque[CompileEvent] = field(
        default_factory=lambda: deque(maxlen=RECENT_COMPILES)
    )
    steps_changed_monotonic: float = 0.0
    platform: str = ""
    ledger: JobLedger = field(default_factory=JobLedger)
    budget: StateBudget = field(default_factory=StateBudget)  # shared by the daemon's jobs
    held_bytes: int = 0  # estimated bytes this job's state holds (see xmon.daemon.bounds)
    pid_verified: bool = False  # the claimed process holds a connection (xmon.daemon.peers)
    # The sample length the agent was last asked for: (at least, at most)
    sample_seconds_told: tuple[float | None, float | None] | None = None
    goodput: GoodputSplit = field(default_factory=GoodputSplit)  # the wall-time account's split
    _programs_sorted: tuple[Program, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Agents announce their devices once per stream (in the hello, or in the first report
        # after the job initialised its backend), not in every report.
        self._add_devices(self.hello.devices)
        self.platform = clean_text(self.hello.platform)
        _ = self.identity  # cleaned once, before the hello is cut to what is read later
        self.hello = _slim_hello(self.hello)
        self._account(JOB_BASE_BYTES + self.hello.ByteSize())

    def release(self) -> None:
        """The job has gone: its bytes no longer count against the daemon's total."""
        self.budget.in_use -= self.held_bytes
        self.held_bytes = 0

    def _account(self, added: int) -> None:
        self.held_bytes += added
        self.budget.in_use += added

    def _add_devices(self, devices: Iterable[xmon_pb2.DeviceInfo]) -> None:
        limit = self.budget.limits.devices_per_job
        for info in devices:
            if info.id in self.devices:
                continue
            if len(self.devices) >= limit:
                self.budget.refuse("devices")
            elif self.budget.room(self.held_bytes) < DEVICE_BYTES:
                self.budget.refuse(self.budget.bound_hit(self.held_bytes))
            else:
                self.devices[info.id] = device_info_from_proto(info)
                self._account(DEVICE_BYTES)

    def _add_programs(self, programs: Iterable[xmon_pb2.ProgramInfo]) -> None:
        limit = self.budget.limits.programs_per_job
        for program in programs:
            known = program.fingerprint in self.programs
            if not known and len(self.programs) >= limit:
                self.budget.refuse("programs")
            elif not known and self.budget.room(self.held_bytes) < PROGRAM_BYTES:
                self.budget.refuse(self.budget.bound_hit(self.held_bytes))
            else:
                self.programs[program.fingerprint] = program_from_proto(program)
                self._programs_sorted = None
                if not known:
                    self._account(PROGRAM_BYTES)

    @property
    def pid(self) -> int:
        return int(self.hello.pid)

    @functools.cached_property
    def job_name(self) -> str:
        return clean_label(self.hello.job_name)

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """The Job fields the hello fixes for the stream's life, cleaned once."""
        hello = self.hello
        return {
            "job_name": self.job_name,
            "pid": self.pid,
            "hostname": clean_label(hello.hostname),
            "jax_version": clean_label(hello.jax_version),
            "jaxlib_version": clean_label(hello.jaxlib_version),
            "process_index": hello.process_index,
            "process_count": max(1, hello.process_count),
            "argv": tuple(clean_label(a) for a in hello.argv[:32]),
            "started_at": hello.started_at,
            "pid_verified": self.pid_verified,
        }

    def restart_key(self) -> tuple[str, int] | None:
        """(job key, process index) where the key outlives the process (declared, or a
        jax.distributed coordinator's): what a restarted process of the job shares with the
        one it replaces (xmon.goodput.restarts). None for keys that name the process."""
        identity = self.report.process if self.report is not None else None
        if identity is None or not (identity.job_key_declared or identity.distributed):
            return None
        return clean_label(identity.job_key), int(identity.process_index)

    def last_step_at(self) -> float:
        """Wall clock of the job's last marked step's end (0 before one)."""
        report = self.report
        return report.goodput.last_step_at if report is not None else 0.0

    def sorted_programs(self) -> tuple[Program, ...]:
        """Programs in compile order; re-sorted only after a report changed them."""
        if self._programs_sorted is None:
            ordered = sorted(self.programs.values(), key=lambda p: p.compiled_at or 0.0)
            self._programs_sorted = tuple(ordered)
        return self._programs_sorted

    def apply(self, report: xmon_pb2.AgentReport, now_wall: float, now_monotonic: float) -> None:
        """Take a report (the received message, changed in place): cut to the job's bounds
        first, so that what is past them costs nothing more, then scrubbed of numbers the
        daemon's arithmetic cannot take."""
        _cut_to_limits(report, self.budget)
        scrub(report)
        previous_steps = self.report.steps.steps_total if self.report is not None else 0
        # Only the parts read later are kept, without unknown fields: the message itself (up to
        # max_message_bytes, padding included) is let go as soon as this returns.
        slim = _slim_report(report, self.budget)
        kept_before = self.report.ByteSize() if self.report is not None else 0
        self.report = slim
        self._account(slim.ByteSize() - kept_before)
        self.last_report_at = now_wall
        self.last_report_monotonic = now_monotonic
        if report.platform:
            self.platform = clean_label(report.platform)
        if len(report.devices) != len(self.devices) or any(
            info.id not in self.devices for info in report.devices
        ):  # a job's devices do not change once known: convert them only once
            self._add_devices(report.devices)
        if report.steps.steps_total != previous_steps or not self.steps_changed_monotonic:
            self.steps_changed_monotonic = now_monotonic
        self.steps_window.extend(report.steps.recent_step_seconds[-STEP_WINDOW:])
        for event in report.compile_events[-RECENT_COMPILES:]:
            self.compile_events.append(
                CompileEvent(
                    fun_name=clean_label(event.fun_name),
                    duration_seconds=event.duration_seconds,
                    wall_time=event.wall_time,
                    cache_hit=event.cache_hit,
                )
            )
        self._add_programs(report.programs)


def _slim_hello(hello: xmon_pb2.AgentHello) -> xmon_pb2.AgentHello:
    """The hello without its devices (converted already), argv past what is shown, and
    unknown fields (dropped from ``hello`` itself too: it is the received message, let go
    once the job holds this copy)."""
    hello.DiscardUnknownFields()
    slim = xmon_pb2.AgentHello()
    slim.CopyFrom(hello)
    slim.ClearField("devices")
    del slim.argv[32:]
    return _compact(slim)


def _compact(message: _Message) -> _Message:
    """A copy of ``message`` holding only what it serializes to, in memory of its own.

    protobuf's Python runtime (upb) keeps a message's contents in an arena that is freed only
    with the whole message: ``ClearField``, ``del`` and ``DiscardUnknownFields`` leave the bytes
    in it, and ``CopyFrom`` copies unknown fields too. A hello padded with 15 MiB of unknown
    fields kept all 15 MiB in its slim copy until the stream ended. Parsing the cut-down
    message again gives an arena of just what the job keeps."""
    return type(message).FromString(message.SerializeToString())


def _cut_to_limits(report: xmon_pb2.AgentReport, budget: StateBudget) -> None:
    """A report's per-device lists past ``devices_per_job``, dropped (and counted) before
    anything walks them: a job announcing 20,000 devices costs what 256 do."""
    limit = budget.limits.devices_per_job
    for per_device in (report.memory, report.devices):
        if len(per_device) > limit:
            budget.refuse("devices", len(per_device) - limit)
            del per_device[limit:]


# What the job does not keep of a report: taken once (programs, devices, the platform) or
# kept elsewhere (compile events and recent step times in the job's windows).
_NOT_KEPT = ("compile_events", "programs", "devices", "platform")


def _slim_report(report: xmon_pb2.AgentReport, budget: StateBudget) -> xmon_pb2.AgentReport:
    """The parts of a report the snapshot reads later: counters, the recompiled functions, the
    stall, the process and each device's memory (at most ``devices_per_job`` samples of
    ``stats_per_device`` stats). Unknown fields are dropped from ``report`` first, so that no
    copy below takes them along (see ``_compact``). Copied whole and cut, in C: every agent
    sends a report every second."""
    report.DiscardUnknownFields()
    slim = xmon_pb2.AgentReport()
    slim.CopyFrom(report)
    for name in _NOT_KEPT:
        slim.ClearField(name)
    del slim.steps.recent_step_seconds[:]
    # read by the findings (xmon.findings.tracker); the agent bounds both (16 rows, 64 KiB)
    del slim.compile_functions[16:]
    seconds = slim.goodput.seconds
    if any(name not in ACCOUNT_BUCKETS for name in seconds):  # only the buckets are read
        known = {name: value for name, value in seconds.items() if name in ACCOUNT_BUCKETS}
        slim.goodput.ClearField("seconds")
        slim.goodput.seconds.update(known)
    cut_report_strings(slim, budget)  # before _compact, which keeps only what is left
    limit = budget.limits.stats_per_device
    for kept in slim.memory:  # no more than devices_per_job samples (_cut_to_limits)
        if len(kept.stats) > limit or max(map(len, kept.stats), default=0) > MAX_LABEL_CHARS:
            _bound_stats(kept, limit, budget)
    return _compact(slim)


def _bound_stats(sample: xmon_pb2.DeviceMemorySample, limit: int, budget: StateBudget) -> None:
    """At most ``limit`` stats (the first by name), none with a name past the label bound."""
    stats = {key: value for key, value in sample.stats.items() if len(key) <= MAX_LABEL_CHARS}
    if len(stats) > limit:
        budget.refuse("memory_stats", len(stats) - limit)
        stats = dict(sorted(stats.items())[:limit])
    sample.ClearField("stats")
    sample.stats.update(stats)


def device_info_from_proto(info: xmon_pb2.DeviceInfo) -> DeviceInfo:
    return DeviceInfo(
        id=info.id,
        platform=clean_text(info.platform),
        device_kind=clean_label(info.device_kind),
        process_index=info.process_index,
        local_hardware_id=info.local_hardware_id if info.HasField("local_hardware_id") else None,
        coords=tuple(info.coords) or None,
        core_on_chip=info.core_on_chip if info.HasField("core_on_chip") else None,
        slice_index=info.slice_index if info.HasField("slice_index") else None,
    )


def program_from_proto(p: xmon_pb2.ProgramInfo) -> Program:
    optional = {name: getattr(p, name) if p.HasField(name) else None for name in _PROGRAM_OPTIONAL}
    return Program(
        fingerprint=clean_label(p.fingerprint),
        name=clean_label(p.name),
        fun_name=clean_label(p.fun_name) if p.fun_name else None,
        num_devices=max(1, p.num_devices),
        compiled_at=p.compiled_at or None,
        cache_hit=p.cache_hit,
        in_step=p.in_step,
        program_ids=tuple(p.program_ids[-MAX_PROGRAM_IDS:]),
        flops_lower_bound=p.flops_lower_bound,
        flops_upper_bound=p.flops_upper_bound,
        loops=p.loops,
        loops_unknown_trip_count=p.loops_unknown_trip_count,
        **optional,
    )


def device_memory(sample: xmon_pb2.DeviceMemorySample) -> DeviceMemory:
    known: dict[str, int] = {}
    stats: dict[str, int] = {}  # keys this daemon does not know yet: kept as they came
    for key, value in sample.stats.items():  # one pass: protobuf maps are slow to look up
        (known if key in _MEMORY_KEYS else stats)[key] = value
    fragmentation = derived.fragmentation_ratio(
        known.get("bytes_limit"), known.get("bytes_in_use"), known.get("largest_free_block_bytes")
    )
    return DeviceMemory(
        live_array_bytes=sample.live_array_bytes if sample.HasField("live_array_bytes") else None,
        live_array_read_at=(
            sample.live_array_read_at if sample.HasField("live_array_read_at") else None
        ),
        extra=stats,
        fragmentation_ratio=fragmentation,
        **known,
    )
