"""The daemon's findings: every detector run on each job it builds, with the history they need.

One :class:`FindingsTracker` per daemon. Each tick it sees every job (and what the latest report
of its agent says beside the job, :class:`AgentEvidence`: the recompiled functions and the stall
stacks, read from the report where the daemon took it) and returns the jobs with their findings
set. Findings that judge a rate wait for steady state: the daemon must itself have
seen ``STEADY_STEPS`` steps arrive since the job attached or the daemon started, and no compile
in the last ``QUIET_AFTER_COMPILE_SECONDS``.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from xmon.findings.goodput import DEFAULT_FLOOR, detect_low_goodput
from xmon.findings.host_bound import detect_host_bound, on_shared_host, waits_for_cpu
from xmon.findings.memory import (
    RESIDENT,
    STALE_READING_SECONDS,
    detect_leak,
    in_use_bytes,
    limit_bytes,
    read_at,
)
from xmon.findings.oom import OomEvent, detect_oom
from xmon.findings.recompiles import FunctionCompiles, detect_recompiles
from xmon.findings.setup import detect_setup
from xmon.findings.stall import detect_stall, last_dispatched
from xmon.model import Finding, HostSample, Job

SEVERITIES = ("info", "warning", "error")
STEADY_STEPS = 10
QUIET_AFTER_COMPILE_SECONDS = 5.0
MEMORY_READINGS = 64
CPU_READINGS = 60  # the job's CPU waits, one per tick: about the ledger's recent window


@dataclass(frozen=True)
class AgentEvidence:
    """What a job's latest report says that its ``Job`` does not carry: the functions it
    compiled and why (the recompile finding's causes), and, while its steps wait, its threads'
    stacks and the program its step thread is in (the stall finding's evidence)."""

    functions: tuple[FunctionCompiles, ...] = ()
    stall_stacks: str = ""
    step_thread_in_program: str = ""


NO_EVIDENCE = AgentEvidence()


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


def worst_first(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (-severity_rank(f.severity), f.kind)))


@dataclass
class _History:
    first_seen: float  # monotonic
    steps_total: int
    steps_changed_at: float
    compiles_total: int
    compile_changed_at: float
    steps_seen: int = 0  # steps that arrived while this daemon watched
    readings: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=MEMORY_READINGS)
    )
    # the process's resident memory at the same step boundaries (the host collector's)
    resident: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=MEMORY_READINGS)
    )
    since: dict[tuple[str, str | None], float] = field(default_factory=dict)
    # (threads waiting for a CPU, cores used) of the job's process, one per tick
    cpu: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=CPU_READINGS))


class FindingsTracker:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        goodput_floor: float = DEFAULT_FLOOR,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self.goodput_floor = goodput_floor  # the daemon's goodput_floor (set again on reload)
        self._jobs: dict[int, _History] = {}
        self._ooms: dict[int, OomEvent] = {}  # each job's latest out-of-memory report

    def note_oom(self, pid: int, event: OomEvent) -> None:
        """A job's agent reported an out-of-memory error (xmon.daemon.oom)."""
        self._ooms[pid] = event

    def annotate(
        self,
        jobs: tuple[Job, ...],
        evidence: Mapping[int, AgentEvidence],
        host: HostSample | None,
    ) -> tuple[Job, ...]:
        """The jobs with their findings, worst first; ``evidence`` by pid (none: nothing
        reported beside the job)."""
        live = {job.pid for job in jobs}
        for pid in [p for p in self._jobs if p not in live]:
            del self._jobs[pid]
        for pid in [p for p in self._ooms if p not in live]:
            del self._ooms[pid]
        return tuple(self._annotated(job, evidence.get(job.pid, NO_EVIDENCE), host) for job in jobs)

    def _annotated(self, job: Job, evidence: AgentEvidence, host: HostSample | None) -> Job:
        findings = self._judge(job, evidence, host)
        history = self._jobs[job.pid]
        since_step = self._clock() - history.steps_changed_at if job.steps.steps_total else None
        steps = dataclasses.replace(job.steps, seconds_since_last_step=since_step)
        return dataclasses.replace(job, findings=findings, steps=steps)

    def _judge(
        self, job: Job, evidence: AgentEvidence, host: HostSample | None
    ) -> tuple[Finding, ...]:
        now = self._clock()
        history = self._observe(job, now)
        found: list[Finding | None] = list(detect_recompiles(evidence.functions, since=0.0))
        found.append(
            detect_stall(
                now - history.steps_changed_at,
                job.steps.p50_step_seconds,
                job.steps.steps_total,
                0.0,
                evidence.stall_stacks,
                last_dispatched(
                    evidence.step_thread_in_program,
                    job.ledger.last_program,
                    job.ledger.last_program_seen_at,
                    self._wall(),
                ),
            )
        )
        cpu_starved = _starved(history)
        if self._steady(history, now):
            found.append(detect_host_bound(job, 0.0, cpu_starved, host))
            leak = detect_leak(tuple(history.readings), job, host, 0.0)
            if leak is None and _readings_stopped(history, now):  # a paced walk fell behind
                leak = detect_leak(tuple(history.resident), job, host, 0.0, RESIDENT)
            found.append(leak)
        found.append(detect_oom(self._ooms.get(job.pid), now, 0.0, *limit_bytes(job, host)))
        shared_host = on_shared_host(job, cpu_starved, host)
        found.append(detect_low_goodput(job.goodput, 0.0, self.goodput_floor, shared_host))
        found.extend(detect_setup(job, now - history.first_seen, 0.0))
        return worst_first(self._dated([f for f in found if f is not None], history))

    def _observe(self, job: Job, now: float) -> _History:
        steps, compiles = job.steps.steps_total, job.compile.compiles_total
        history = self._jobs.get(job.pid)
        if history is None or steps < history.steps_total:  # new job, or a restarted counter
            # no compile seen yet: the steps-seen count alone gates the first judgement
            history = _History(now, steps, now, compiles, now - QUIET_AFTER_COMPILE_SECONDS)
            self._jobs[job.pid] = history
        if steps != history.steps_total:
            history.steps_seen += steps - history.steps_total
            history.steps_total, history.steps_changed_at = steps, now
            used = in_use_bytes(job)
            read_wall = read_at(job)
            at = now if read_wall is None else now - max(0.0, self._wall() - read_wall)
            if used is not None and (not history.readings or at > history.readings[-1][0]):
                history.readings.append((at, float(used)))
            resident = job.process.resident_memory_bytes if job.process is not None else None
            if resident is not None:
                history.resident.append((now, float(resident)))
        if compiles != history.compiles_total:
            history.compiles_total, history.compile_changed_at = compiles, now
        process = job.process
        if process is not None and process.cpu_wait_threads is not None:
            history.cpu.append((process.cpu_wait_threads, process.cpu_utilization_ratio or 0.0))
        return history

    @staticmethod
    def _steady(history: _History, now: float) -> bool:
        return (
            history.steps_seen >= STEADY_STEPS
            and now - history.compile_changed_at >= QUIET_AFTER_COMPILE_SECONDS
        )

    def _dated(self, findings: list[Finding], history: _History) -> list[Finding]:
        """Each finding with the wall time its (kind, subject) was first seen, continuously."""
        wall = self._wall()
        since = {
            (f.kind, f.subject): history.since.get((f.kind, f.subject), wall) for f in findings
        }
        history.since = since
        return [dataclasses.replace(f, since=since[(f.kind, f.subject)]) for f in findings]


def _readings_stopped(history: _History, now: float) -> bool:
    """No device reading new for ``STALE_READING_SECONDS`` while the job steps (none at all
    counts too: a platform without memory stats)."""
    return not history.readings or now - history.readings[-1][0] > STALE_READING_SECONDS


def _starved(history: _History) -> bool | None:
    """Whether the job waited for a CPU over its recent ticks, on average (None: unknown)."""
    if not history.cpu:
        return None
    n = len(history.cpu)
    return waits_for_cpu(sum(w for w, _ in history.cpu) / n, sum(u for _, u in history.cpu) / n)
