"""Triggered captures: rules evaluated on every snapshot, rate-limited per job and rule.

* ``step_time``: a new step took more than ``factor`` x the median of the job's recent steps
  -> trace. Only in steady state: the engine must itself have seen ``min_steps`` steps arrive
  since the job attached or the daemon started (a restart never judges the steps it inherits),
  steps that arrive with a new compile or an execution-ledger sample (the profiler's start
  slows the step it lands in) and the next ``QUIET_STEPS`` are not judged, and the regression
  must persist (``persist_steps`` slow steps among the judged steps of the last
  ``persist_seconds``, at least ``PERSIST_MIN_STEPS`` of them, that are either half of those
  steps or together ``persist_min_excess_seconds`` longer than the median) or be extreme
  (``extreme_factor`` x the median, and ``extreme_min_excess_seconds`` longer than it).
  The floors are in time because a busy host stretches steps by tens to hundreds of
  milliseconds now and then (the scheduler hands the cores to other processes): for a 1 ms
  step that is 10x, and a few such steps among many are 3x, yet nothing in the job changed
  and a trace taken after them shows nothing. Steps that arrive while, or within
  ``STARVED_TICKS`` snapshots after, the job's threads wait for a CPU
  (xmon.findings.host_bound.starved: an oversubscribed host) are not judged either.
* ``memory``: a device's PJRT allocator holds more than ``ratio`` of its ``bytes_limit``
  -> device memory profile. Devices without a limit (CPU) never fire.

Each rule fires at most once per ``min_interval_seconds`` per job, and never while the job is
already capturing. Steps are seen through the snapshot's recent-step window (the last 64 steps),
so a slow step among more than 64 steps in one period can be missed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from xmon.analysis.derived import percentile
from xmon.config.profiling import ProfilingConfig
from xmon.findings.host_bound import starved
from xmon.model import Job, Snapshot

HISTORY = 256  # step durations the median is taken over
QUIET_STEPS = 2  # steps not judged after a compile or a ledger sample
RECENT_JUDGED = 4096  # judged steps kept for the persistence rule's look back
STARVED_TICKS = 8  # snapshots back in which a CPU wait keeps new steps from being judged
PERSIST_MIN_STEPS = 8  # the persistence rule looks back over at least this many judged steps


@dataclass(frozen=True)
class TriggerRules:
    step_time_factor: float | None = 3.0  # None: rule off
    min_steps: int = 20
    memory_ratio: float | None = 0.95  # None: rule off
    trace_seconds: float = 2.0
    min_interval_seconds: float = 600.0
    persist_steps: int = 3  # slow steps among the judged steps of the last persist_seconds
    persist_seconds: float = 1.0
    persist_min_excess_seconds: float = 1.0  # slow steps' time past the median, together
    extreme_factor: float = 10.0  # one step this slow (or ``factor``, if higher) is enough,
    extreme_min_excess_seconds: float = 1.0  # if it is also this much longer than the median

    @classmethod
    def from_config(cls, config: ProfilingConfig) -> TriggerRules:
        return cls(
            step_time_factor=config.trigger_step_time_factor or None,
            min_steps=config.trigger_min_steps,
            memory_ratio=config.trigger_memory_ratio or None,
            trace_seconds=config.trigger_trace_seconds,
            min_interval_seconds=config.trigger_min_interval_seconds,
        )


@dataclass(frozen=True)
class Fire:
    """A rule that fired for a job: what to capture and why."""

    job_name: str
    pid: int
    trigger: str  # "step_time" | "memory"
    reason: str

    @property
    def memory(self) -> bool:
        return self.trigger == "memory"


@dataclass
class _History:
    steps_total: int | None = None
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    last_fire: dict[str, float] = field(default_factory=dict)
    seen: int = 0  # steps that arrived while this engine watched
    quiet_until: int = 0  # steps_total up to which steps are not judged
    marks: tuple[int, int] | None = None  # (compiles, ledger samples) at the last snapshot
    # (seconds, seconds past the median if slow else 0) of the latest judged steps: only those
    # the persistence rule's look back can still reach (see TriggerEngine._keep_reachable)
    judged: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=RECENT_JUDGED))
    # whether the job waited for a CPU, per snapshot: a slow step spans several of them
    starved: deque[bool] = field(default_factory=lambda: deque(maxlen=STARVED_TICKS))


class TriggerEngine:
    def __init__(self, rules: TriggerRules, clock: Callable[[], float] = time.monotonic) -> None:
        self.rules = rules
        self._clock = clock
        self._jobs: dict[int, _History] = {}
        self.fired_total = 0

    def evaluate(self, snapshot: Snapshot, busy: Collection[int] = ()) -> list[Fire]:
        live = {job.pid for job in snapshot.jobs}
        for pid in [p for p in self._jobs if p not in live]:
            del self._jobs[pid]
        fires = []
        for job in snapshot.jobs:
            history = self._jobs.setdefault(job.pid, _History())
            for reason in (self._slow_step(job, history), self._memory(job)):
                if reason is None:
                    continue
                trigger, text = reason
                if job.pid in busy or not self._may_fire(history, trigger):
                    continue
                history.last_fire[trigger] = self._clock()
                fires.append(Fire(job.job_name, job.pid, trigger, text))
        self.fired_total += len(fires)
        return fires

    def _may_fire(self, history: _History, trigger: str) -> bool:
        last = history.last_fire.get(trigger)
        return last is None or self._clock() - last >= self.rules.min_interval_seconds

    def _slow_step(self, job: Job, history: _History) -> tuple[str, str] | None:
        """Check the steps that are new since the last snapshot, then add them to history."""
        total, window = job.steps.steps_total, job.steps.window
        marks = (job.compile.compiles_total, job.agent.ledger_samples_total)
        if history.steps_total is None or total < history.steps_total:
            history.steps_total, history.seen, history.marks = total, 0, marks
            history.durations.extend(window)  # a baseline only: these steps are never judged
            return None
        new = total - history.steps_total
        history.steps_total = total
        history.seen += max(0, new)
        if marks != history.marks:  # a compile or a profiler session: its steps are slow
            history.marks, history.quiet_until = marks, total + QUIET_STEPS
        history.starved.append(starved(job.process))
        if any(history.starved):  # the host, not the job: its threads wait for a CPU
            history.quiet_until = total + QUIET_STEPS
        fresh = window[-new:] if 0 < new <= len(window) else (window if new > 0 else ())
        factor = self.rules.step_time_factor
        # New steps are judged against the steps before them, one median per snapshot: a job
        # reporting hundreds of steps a tick must not cost a sort per step.
        judged = total > history.quiet_until and history.seen >= self.rules.min_steps
        enough = factor is not None and judged and len(history.durations) >= self.rules.min_steps
        median = (percentile(history.durations, 50) or 0.0) if enough and fresh else 0.0
        history.durations.extend(fresh)
        if factor is None or median <= 0 or not fresh:
            return None
        return self._judge(history, fresh, median, factor)

    def _judge(
        self, history: _History, fresh: tuple[float, ...], median: float, factor: float
    ) -> tuple[str, str] | None:
        history.judged.extend(
            (seconds, seconds - median if seconds > factor * median else 0.0) for seconds in fresh
        )
        self._keep_reachable(history)
        seconds = max(fresh)
        ratio = seconds / median
        extreme = (
            ratio > max(self.rules.extreme_factor, factor)
            and seconds - median >= self.rules.extreme_min_excess_seconds
        )
        if ratio <= factor or not (extreme or self._persists(history)):
            return None
        history.judged.clear()
        why = "" if extreme else f", {self.rules.persist_steps} slow steps of the last few"
        return "step_time", (
            f"step took {seconds:.3g} s, {ratio:.1f} x the median {median:.3g} s of recent steps "
            f"(rule: > {factor:g} x{why})"
        )

    def _keep_reachable(self, history: _History) -> None:
        """Forget the judged steps :meth:`_persists` can no longer reach: it reads back from the
        newest until it covers ``persist_seconds`` and ``PERSIST_MIN_STEPS`` steps, so an older
        step that lies past that point stays past it as newer steps come. A job stepping every
        10 ms keeps ~100, not ``RECENT_JUDGED`` (400 KiB a job)."""
        judged = history.judged
        covered = sum(seconds for seconds, _ in judged)
        while (
            len(judged) > PERSIST_MIN_STEPS and covered - judged[0][0] >= self.rules.persist_seconds
        ):
            covered -= judged.popleft()[0]

    def _persists(self, history: _History) -> bool:
        """Among the latest judged steps covering ``persist_seconds`` (and at least
        ``PERSIST_MIN_STEPS`` steps): ``persist_steps`` slow ones that are half of them, or
        that together took ``persist_min_excess_seconds`` past the median."""
        covered, steps, slow, excess = 0.0, 0, 0, 0.0
        for seconds, past in reversed(history.judged):
            covered, steps = covered + seconds, steps + 1
            slow, excess = slow + (past > 0), excess + past
            if covered >= self.rules.persist_seconds and steps >= PERSIST_MIN_STEPS:
                break
        if slow < self.rules.persist_steps:
            return False
        return 2 * slow >= steps or excess >= self.rules.persist_min_excess_seconds

    def _memory(self, job: Job) -> tuple[str, str] | None:
        ratio = self.rules.memory_ratio
        if ratio is None:
            return None
        for device in job.devices:
            memory = device.memory
            used, limit = memory.bytes_in_use, memory.bytes_limit
            if used is None or not limit or used / limit < ratio:
                continue
            return "memory", (
                f"device {device.info.id}: {used} of {limit} bytes in use "
                f"({100 * used / limit:.1f} % >= {100 * ratio:g} %)"
            )
        return None
