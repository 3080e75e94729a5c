"""What the daemon knows about each attached job between its reports.

Agents send cumulative counters plus what is new since their last report; the intake makes
model objects of them (xmon.daemon.intake.convert, into xmon.daemon.received) and this module
keeps the per-job state (bounded: xmon.daemon.bounds): the hello's identity, the latest
report's parts, the devices and programs taken, windows of step times and compiles.
xmon.daemon.job_builder turns the state into a ``model.Job``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from xmon.daemon.bounds import DEVICE_BYTES, JOB_BASE_BYTES, PROGRAM_BYTES, StateBudget
from xmon.daemon.received import (
    RECENT_COMPILES,
    STEP_WINDOW,
    Hello,
    Report,
    ReportParts,
    clean_label,
    conditionals_bytes,
)
from xmon.execution.ledger import JobLedger
from xmon.goodput.split import GoodputSplit
from xmon.model import CompileEvent, Conditional, DeviceInfo, Program


@dataclass
class JobState:
    hello: Hello
    connected_at: float
    last_report_at: float = 0.0
    last_report_monotonic: float = 0.0
    report: ReportParts | None = None  # the latest report's, as the intake made them
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
        self.platform = self.hello.platform
        self.hello = dataclasses.replace(self.hello, devices=())  # they are the job's now
        self._account(JOB_BASE_BYTES + self.hello.estimated_bytes)

    def release(self) -> None:
        """The job has gone: its bytes no longer count against the daemon's total."""
        self.budget.in_use -= self.held_bytes
        self.held_bytes = 0

    def _account(self, added: int) -> None:
        self.held_bytes += added
        self.budget.in_use += added

    def _add_devices(self, devices: Iterable[DeviceInfo]) -> None:
        limit = self.budget.limits.devices_per_job
        for info in devices:
            if info.id in self.devices:
                continue
            if len(self.devices) >= limit:
                self.budget.refuse("devices")
            elif self.budget.room(self.held_bytes) < DEVICE_BYTES:
                self.budget.refuse(self.budget.bound_hit(self.held_bytes))
            else:
                self.devices[info.id] = info
                self._account(DEVICE_BYTES)

    def _add_programs(self, programs: Iterable[Program]) -> None:
        limit = self.budget.limits.programs_per_job
        for program in programs:
            previous = self.programs.get(program.fingerprint)
            size = conditionals_bytes(program)
            if previous is None:
                size += PROGRAM_BYTES
            else:
                size -= conditionals_bytes(previous)
            if previous is None and len(self.programs) >= limit:
                self.budget.refuse("programs")
            elif size > 0 and self.budget.room(self.held_bytes) < size:
                self.budget.refuse(self.budget.bound_hit(self.held_bytes))
            else:
                self.programs[program.fingerprint] = program
                self._programs_sorted = None
                self._account(size)

    def conditionals_by_id(self) -> dict[int, tuple[Conditional, ...]]:
        """The conditionals whose branches the job's samples are to count, by the module ids
        of their programs (xmon.execution.branches)."""
        return {
            module: program.conditionals
            for program in self.programs.values()
            if program.conditionals
            for module in program.program_ids
        }

    @property
    def pid(self) -> int:
        return self.hello.pid

    @property
    def job_name(self) -> str:
        return self.hello.job_name

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """The Job fields the hello fixes for the stream's life."""
        hello = self.hello
        return {
            "job_name": hello.job_name,
            "pid": hello.pid,
            "hostname": clean_label(hello.hostname),  # "unnamed" where the agent sent none
            "jax_version": hello.jax_version,
            "jaxlib_version": hello.jaxlib_version,
            "process_index": hello.process_index,
            "process_count": hello.process_count,
            "argv": hello.argv,
            "started_at": hello.started_at,
            "pid_verified": self.pid_verified,
        }

    def restart_key(self) -> tuple[str, int] | None:
        """(job key, process index) where the key outlives the process (declared, or a
        jax.distributed coordinator's): what a restarted process of the job shares with the
        one it replaces (xmon.goodput.restarts). None for keys that name the process."""
        fleet = self.report.fleet if self.report is not None else None
        if fleet is None or not (fleet.job_key_declared or fleet.distributed):
            return None
        return fleet.job_key, fleet.process_index

    def last_step_at(self) -> float:
        """Wall clock of the job's last marked step's end (0 before one)."""
        account = self.report.goodput if self.report is not None else None
        return account.last_step_at if account is not None else 0.0

    def sorted_programs(self) -> tuple[Program, ...]:
        """Programs in compile order; re-sorted only after a report changed them."""
        if self._programs_sorted is None:
            ordered = sorted(self.programs.values(), key=lambda p: p.compiled_at or 0.0)
            self._programs_sorted = tuple(ordered)
        return self._programs_sorted

    def apply(self, report: Report, now_wall: float, now_monotonic: float) -> None:
        """Take a report the intake converted (already cut to the job's bounds and cleaned)."""
        parts = report.parts
        previous = self.report
        self.report = parts
        self._account(parts.estimated_bytes - (previous.estimated_bytes if previous else 0))
        self.last_report_at = now_wall
        self.last_report_monotonic = now_monotonic
        if report.platform:
            self.platform = report.platform
        if report.devices:  # only those the job did not know: a job's devices do not change
            self._add_devices(report.devices)
        previous_steps = previous.steps.steps_total if previous is not None else 0
        if parts.steps.steps_total != previous_steps or not self.steps_changed_monotonic:
            self.steps_changed_monotonic = now_monotonic
        self.steps_window.extend(report.recent_step_seconds)
        self.compile_events.extend(report.compile_events)
        self._add_programs(report.programs)
