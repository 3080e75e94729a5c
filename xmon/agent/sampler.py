"""Execution samples: short profiler sessions in memory, sent to the daemon unread.

JAX's C++ dispatch path runs compiled programs with no Python hook, so the job cannot count its
own executions cheaply; XLA's profiler sees every one. Every ``interval`` seconds (with jitter,
so the samples never lock onto the job's step phase) this thread records the job for
``duration`` seconds with ``jaxlib``'s ``ProfilerSession``, whose ``stop()`` returns the
serialized XSpace without writing files, and hands the bytes to the transport. Parsing happens
in the daemon (xmon.execution.ledger), never in the job.

Never colliding with the user's profiler use or with a capture: a sample holds jax's own
profiler lock (the one ``jax.profiler.start_trace`` takes, reached through
:mod:`xmon.agent.internals`) for its whole session, and skips (and counts) when a session is
already running or the lock is held. A ``start_trace`` that arrives during a sample therefore
waits for it (at most ``duration`` plus the session's stop) instead of failing. A session
started by the profiler server (remote capture) is not visible to Python: the sample then fails
to start and is counted as skipped, and the remote capture is unaffected.

Samples hold whole steps. In a job that marks steps, a sample records until at least two step
begins fell inside it and at least ``duration`` passed, so the daemon has one whole step or more
(it counts the executions between the first and last begin where steps are long): executions per
step are never estimated from a part of one (a 0.2 s sample of 0.3 s steps gave 1.5). Where
steps are long (a second or more) the session opens a tenth of a step before the next begin is due,
so a sample lasts about one step, not two. The duty cycle stays what ``duration`` / ``interval``
says: after a sample of ``recorded`` seconds the next one waits ``recorded / duty``, so a job of
10 s steps is sampled about every 20 minutes and its first numbers come one sample after
``first_delay``. A job without markers records ``duration`` seconds, or longer where the daemon
asks (``SampleLength``): its steps are inferred from whole periods of its busiest program, and a
sample of long steps holds too few of them.

The default duty cycle (``DEFAULT_DURATION`` / ``DEFAULT_INTERVAL``) was chosen by measurement;
see docs/benchmarks.md ("Execution ledger").
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xmon.agent import internals
from xmon.agent.capabilities import Capabilities
from xmon.wire.proto import xmon_pb2
from xmon.wire.protocol import (
    SAMPLE_ANCHOR,
    SAMPLE_MAX_BYTES,
    SAMPLE_MIN_SECONDS,
    SAMPLE_RECORD_MAX_SECONDS,
)

log = logging.getLogger("xmon.agent")

DEFAULT_INTERVAL = 20.0
DEFAULT_DURATION = 0.2
FIRST_DELAY = 5.0  # after attach: let start-up compiles pass
MAX_SAMPLE_BYTES = SAMPLE_MAX_BYTES  # a sample larger than the daemon reads is dropped, not sent
JITTER = 0.2  # the interval varies by up to this share either way
MAX_STEP_BEGINS = 4096
STOP_WAIT_SECONDS = 30.0  # collecting a session takes seconds on a loaded host
# Sessions in a row that fail to start or stop (not those skipped because the profiler was
# busy) before the ledger is reported unavailable: one can fail on a transient error.
FAILURES_UNTIL_UNAVAILABLE = 3
# The longest a sample of a marked job records waiting for its second step begin; past it
# (the job stopped marking steps) the sample ends with what it holds.
MAX_SAMPLE_SECONDS = SAMPLE_RECORD_MAX_SECONDS
SAMPLE_LIMIT_STEPS = 2.5  # a sample's limit in the longest recent steps, beyond `duration`
MIN_SAMPLE_SECONDS = SAMPLE_MIN_SECONDS
SIZE_MARGIN = 0.7  # of the length that would have fit: event rates vary from sample to sample
POLL_SECONDS = 0.01  # how often a recording sample looks for new step begins
LONG_STEP_SECONDS = 1.0  # steps at least this long: open the session just before a begin
LEAD_IN_SHARE = 0.1  # of a step: how early before the predicted begin it opens
RECENT_STEPS = 16  # step intervals the limit and the prediction look at
NOT_STEPPING_RETRY = 5.0  # a marked job without two recent begins: try again this much later


@dataclass(frozen=True)
class LedgerConfig:
    enabled: bool = True
    interval: float = DEFAULT_INTERVAL
    duration: float = DEFAULT_DURATION
    first_delay: float = FIRST_DELAY

    def __post_init__(self) -> None:
        if not MIN_SAMPLE_SECONDS <= self.duration <= 10.0:
            raise ValueError(f"ledger duration must be 0.01-10 s, got {self.duration}")
        if not self.duration < self.interval <= 86400:
            raise ValueError(
                f"ledger interval must exceed its duration ({self.duration} s), got {self.interval}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LedgerConfig:
        """``XMON_LEDGER=off`` (or 0/false/no) disables; ``XMON_LEDGER_INTERVAL`` and
        ``XMON_LEDGER_DURATION`` set the duty cycle in seconds."""
        enabled = env.get("XMON_LEDGER", "on").strip().lower() not in ("0", "off", "false", "no")
        return cls(
            enabled=enabled,
            interval=_seconds(env, "XMON_LEDGER_INTERVAL", DEFAULT_INTERVAL),
            duration=_seconds(env, "XMON_LEDGER_DURATION", DEFAULT_DURATION),
            first_delay=_seconds(env, "XMON_LEDGER_FIRST_DELAY", FIRST_DELAY),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a number of seconds, got {text!r}")
    return value


class ExecutionSampler:
    """Takes execution samples on its own daemon thread while ``ready()`` says to."""

    def __init__(
        self,
        config: LedgerConfig,
        send: Callable[[xmon_pb2.ExecutionSample], bool],
        ready: Callable[[], bool],
        step_begins: Callable[[], Sequence[float]] = tuple,
        capabilities: Capabilities | None = None,
    ) -> None:
        self.config = config
        self._capabilities = capabilities or Capabilities(internals.probe())
        self._failures = 0  # sessions in a row that failed
        self._send = send
        self._ready = ready
        self._step_begins = step_begins  # perf_counter readings of marked step begins
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_total = 0
        self.skipped_total = 0
        self.busy_total = 0  # skipped because the profiler was busy (the job's trace, a capture)
        self.busy_seconds = 0.0  # time spent starting and stopping sessions
        self.too_large_total = 0  # samples dropped for their size (larger than the daemon reads)
        self.last_recorded = 0.0  # seconds the latest sample recorded (0: none taken)
        self.next_sample_at: float | None = None  # wall clock of the next sample, while waiting
        self._start_cost = 0.1  # seconds the latest session took to start recording
        self._not_stepping = False  # the latest try found a marked job not stepping
        # What a sample records at least: longer where the daemon asks (ask_length), for
        # samples of the kind it asked about (whether the job marked steps then)
        self.asked_seconds = config.duration
        self._asked_marked = False
        # The longest a sample records beyond whole steps, where samples were too large: as
        # the daemon asked (more events than it reads), or as this agent found (more bytes
        # than it sends); None: no such limit
        self.daemon_most_seconds: float | None = None
        self.size_most_seconds: float | None = None

    def ask_length(self, seconds: float, max_seconds: float = 0.0) -> None:
        """The daemon's ask for longer samples: of a job without markers (its samples held
        too few starts of its busiest program), or of any job running a program too rare for
        two of its runs in a sample. Taken within the configured duration and
        MAX_SAMPLE_SECONDS; 0 restores the configured duration; anything else is ignored.

        ``max_seconds``: the longest a sample should record (beyond whole steps), because
        longer ones held more events than the daemon reads; at least MIN_SAMPLE_SECONDS, and
        0 (or anything not a positive number) is no such limit."""
        if seconds == 0:
            self.asked_seconds = self.config.duration
        elif math.isfinite(seconds) and seconds > 0:
            self.asked_seconds = min(MAX_SAMPLE_SECONDS, max(self.config.duration, seconds))
            self._asked_marked = bool(self._step_begins())
        self.daemon_most_seconds = _most(max_seconds)

    @property
    def most_seconds(self) -> float | None:
        """The longest a sample records beyond whole steps (None: no limit)."""
        limits = [m for m in (self.daemon_most_seconds, self.size_most_seconds) if m is not None]
        return min(limits, default=None)

    def _length(self, marked: bool) -> float:
        """What a sample records at least: as the daemon asked, where it asked about samples
        of this kind; else as configured. An ask for a job's start-up before it marked steps
        (longer and longer samples of its initialisation's programs, up to minutes) does not
        hold for its marked samples, which hold whole steps: the daemon takes it back once one
        arrives, and the first would otherwise have recorded that long. Samples found too
        large are shorter (``most_seconds``): a sample that is not read gives nothing."""
        length = self.asked_seconds if self._asked_marked == marked else self.config.duration
        most = self.most_seconds
        return length if most is None else min(length, most)

    def _too_large(self, recorded: float, size: int) -> None:
        """A sample of ``recorded`` seconds came to ``size`` bytes, more than a sample may
        be: the next ones record for as long as would have fit, with room to spare, and
        shorter than the limit this one was recorded under (its start and stop are part of
        ``recorded``: without that, a limit could stay where samples never fit)."""
        fitting = recorded * MAX_SAMPLE_BYTES / size * SIZE_MARGIN
        if self.size_most_seconds is not None:
            fitting = min(fitting, self.size_most_seconds * SIZE_MARGIN)
        self.size_most_seconds = max(MIN_SAMPLE_SECONDS, fitting)
        self.too_large_total += 1

    def start(self) -> None:
        if not self.config.enabled:
            return
        self._thread = threading.Thread(target=self._loop, name="xmon-ledger", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for a session in progress to end. The wait matters at exit: a daemon
        thread still inside the profiler's C++ code when the interpreter finalizes is unwound
        there, and the process aborts ("FATAL: exception not rethrown")."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.config.duration + STOP_WAIT_SECONDS)

    def _loop(self) -> None:
        delay = self.config.first_delay
        while not self._wait(delay):
            self.last_recorded = 0.0
            if self._ready():
                self.sample_once()
            if self._not_stepping:
                delay = min(self.config.interval, NOT_STEPPING_RETRY)
                continue
            delay = next_delay(self.config, self.last_recorded)
            spread = delay * JITTER
            delay += random.uniform(-spread, spread)

    def _wait(self, delay: float) -> bool:
        """Wait ``delay`` seconds, saying when the next sample is due; True once stopped."""
        self.next_sample_at = time.time() + delay
        stopped = self._stop.wait(delay)
        self.next_sample_at = None
        return stopped

    def sample_once(self) -> bool:
        """Record one sample and send it; False when skipped (never raises)."""
        if not self._capabilities.available("ledger"):
            self.skipped_total += 1
            return False
        try:
            sample = self._record()
            self._failures = 0
        except Exception as exc:  # noqa: BLE001 - a failed session must not end the thread
            self._failed(exc)
            sample = None
        if sample is None:
            if not self._not_stepping:  # waiting for a marked job's steps is no skip
                self.skipped_total += 1
            return False
        if not self._send(sample):  # the transport dropped it (daemon gone or slow)
            self.skipped_total += 1
            return False
        self.samples_total += 1
        return True

    def _failed(self, exc: Exception) -> None:
        log.debug("xmon: execution sample failed: %r", exc)
        self._failures += 1
        if isinstance(exc, internals.Unavailable):
            self._capabilities.lost("ledger", str(exc))
        elif self._failures >= FAILURES_UNTIL_UNAVAILABLE:
            reason = f"{self._failures} profiler sessions in a row failed: {exc!r}"
            self._capabilities.lost("ledger", reason)

    def _record(self) -> xmon_pb2.ExecutionSample | None:
        state = internals.profiler_state()
        begins = tuple(self._step_begins())
        intervals = recent_intervals(begins)
        self._not_stepping = bool(begins) and not intervals
        if self._not_stepping:
            return None  # a marked job between steps of unknown length: none to hold yet
        wait = lead_in(intervals, begins, time.perf_counter(), self._start_cost)
        if wait > 0:
            self._stop.wait(wait)
        if self._stop.is_set():
            return None  # the job is ending: no new session to wait for
        if not state.lock.acquire(blocking=False):
            self.busy_total += 1
            return None  # a start_trace or stop_trace is running right now
        try:
            if state.session_running():
                self.busy_total += 1
                return None  # the user's (or a capture's) trace is running
            return self._session()
        finally:
            state.lock.release()

    def _session(self) -> xmon_pb2.ExecutionSample | None:
        options = _options(internals.profile_options())
        started_at = time.time()
        opened = time.perf_counter()
        session = internals.start_raw_session(options)
        running = time.perf_counter()
        self._start_cost = running - opened
        anchor = _anchor()
        marked = bool(self._step_begins())
        if marked:
            self._record_whole_steps(running)
        else:
            self._stop.wait(self._length(marked=False))
        stopping = time.perf_counter()
        data = session.stop()  # collects what was recorded until now
        self.busy_seconds += (running - opened) + (time.perf_counter() - stopping)
        recorded = stopping - opened
        self.last_recorded = recorded
        # Begins before the session recorded would count steps whose executions it missed.
        begins = [t - opened for t in tuple(self._step_begins()) if running <= t <= stopping]
        if not isinstance(data, bytes) or not data:
            return None
        if len(data) > MAX_SAMPLE_BYTES:
            self._too_large(recorded, len(data))
            return None
        sample = xmon_pb2.ExecutionSample(
            started_at=started_at,
            duration_seconds=recorded,
            xspace=data,
            step_begin_seconds=begins[:MAX_STEP_BEGINS],
            steps_marked=marked,
        )
        if anchor is not None:
            sample.anchor_seconds = anchor - opened
        return sample

    def _record_whole_steps(self, running: float) -> None:
        """Wait while the session records, until it holds a whole step and the duration
        (as configured, or as the daemon asked)."""
        duration = self._length(marked=True)
        limit = sample_limit(duration, recent_intervals(tuple(self._step_begins())))
        while not self._stop.is_set():
            elapsed = time.perf_counter() - running
            begun = _begun_since(tuple(self._step_begins()), running)
            if holds_whole_steps(begun, elapsed, duration) or elapsed >= limit:
                return
            self._stop.wait(POLL_SECONDS)


def _anchor() -> float | None:
    """Record the anchor annotation; the clock reading just before it began (None where the
    annotation fails: the daemon then estimates steps from rates)."""
    try:
        import jax.profiler

        at = time.perf_counter()
        with jax.profiler.TraceAnnotation(SAMPLE_ANCHOR):
            pass
    except Exception:  # noqa: BLE001 - the sample goes on without it
        return None
    return at


def _begun_since(begins: Sequence[float], since: float) -> int:
    count = 0
    for begin in reversed(begins):
        if begin < since:
            break
        count += 1
    return count


def holds_whole_steps(begun: int, elapsed: float, duration: float) -> bool:
    """Whether a marked sample can stop: two begins (a whole step between them) and
    ``duration`` recorded (several steps when steps are short)."""
    return begun >= 2 and elapsed >= duration


def recent_intervals(begins: Sequence[float]) -> list[float]:
    """The intervals between the latest RECENT_STEPS + 1 step begins."""
    latest = list(begins[-(RECENT_STEPS + 1) :])
    return [b - a for a, b in zip(latest, latest[1:], strict=False) if b > a]


def sample_limit(duration: float, intervals: Sequence[float]) -> float:
    """The longest a marked sample records: ``duration`` and room for two begins of the
    longest recent step, at most MAX_SAMPLE_SECONDS."""
    longest = max(intervals, default=MAX_SAMPLE_SECONDS)
    return min(MAX_SAMPLE_SECONDS, duration + SAMPLE_LIMIT_STEPS * longest)


def lead_in(
    intervals: Sequence[float], begins: Sequence[float], now: float, start_cost: float
) -> float:
    """Seconds to wait before opening a session so it starts a tenth of a step (and its own
    start-up) before the next step begin is due; 0 for short or irregular steps."""
    if not intervals or not begins:
        return 0.0
    step = sorted(intervals)[len(intervals) // 2]
    if step < LONG_STEP_SECONDS or max(intervals) > 1.5 * step:
        return 0.0  # short steps come soon anyway; irregular ones cannot be predicted
    margin = LEAD_IN_SHARE * step + start_cost
    due = begins[-1] + step
    while due - margin <= now:
        due += step
    return min(due - margin - now, step)


def next_delay(config: LedgerConfig, recorded: float) -> float:
    """The wait before the next sample: the interval, longer after a long sample so that
    the share of time recorded stays ``duration / interval``."""
    return max(config.interval, recorded * config.interval / config.duration)


def _most(seconds: float) -> float | None:
    """A limit on a sample's length as asked: None for 0 or anything not a positive number."""
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return min(MAX_SAMPLE_SECONDS, max(MIN_SAMPLE_SECONDS, seconds))


def _options(options: Any) -> Any:
    options.python_tracer_level = 0  # Python function events: costly and not needed here
    # Level 1 keeps XLA's op events (the CPU backend records device work on host threads)
    # and drops the verbose host TraceMes of levels 2-3.
    options.host_tracer_level = 1
    # The programs' HLO travels separately (xmon.agent.hlo_store): without it a sample is a
    # fraction of the size to collect, send and parse.
    if hasattr(options, "enable_hlo_proto"):
        options.enable_hlo_proto = False
    return options


def config_from(
    enabled: bool | None,
    interval: float | None,
    duration: float | None,
    env: Mapping[str, str] | None = None,
) -> LedgerConfig:
    """Arguments of ``attach()`` over the environment over the defaults."""
    base = LedgerConfig.from_env(os.environ if env is None else env)
    return LedgerConfig(
        enabled=base.enabled if enabled is None else enabled,
        interval=base.interval if interval is None else interval,
        duration=base.duration if duration is None else duration,
        first_delay=base.first_delay,
    )
