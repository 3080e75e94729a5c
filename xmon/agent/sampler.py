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
from xmon.proto import xmon_pb2

log = logging.getLogger("xmon.agent")

DEFAULT_INTERVAL = 20.0
DEFAULT_DURATION = 0.2
FIRST_DELAY = 5.0  # after attach: let start-up compiles pass
MAX_SAMPLE_BYTES = 8 * 1024 * 1024  # a sample larger than this is dropped, not sent
JITTER = 0.2  # the interval varies by up to this share either way
MAX_STEP_BEGINS = 4096
STOP_WAIT_SECONDS = 30.0  # collecting a session takes seconds on a loaded host
# Sessions in a row that fail to start or stop (not those skipped because the profiler was
# busy) before the ledger is reported unavailable: one can fail on a transient error.
FAILURES_UNTIL_UNAVAILABLE = 3


@dataclass(frozen=True)
class LedgerConfig:
    enabled: bool = True
    interval: float = DEFAULT_INTERVAL
    duration: float = DEFAULT_DURATION
    first_delay: float = FIRST_DELAY

    def __post_init__(self) -> None:
        if not 0.01 <= self.duration <= 10.0:
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
        while not self._stop.wait(delay):
            if self._ready():
                self.sample_once()
            spread = self.config.interval * JITTER
            delay = self.config.interval + random.uniform(-spread, spread)

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
        self._stop.wait(self.config.duration)
        stopping = time.perf_counter()
        data = session.stop()  # collects what was recorded until now
        self.busy_seconds += (running - opened) + (time.perf_counter() - stopping)
        recorded = stopping - opened
        begins = [t - opened for t in tuple(self._step_begins()) if opened <= t <= stopping]
        if not isinstance(data, bytes) or not data or len(data) > MAX_SAMPLE_BYTES:
            return None
        return xmon_pb2.ExecutionSample(
            started_at=started_at,
            duration_seconds=recorded,
            xspace=data,
            step_begin_seconds=begins[-MAX_STEP_BEGINS:],
            steps_marked=bool(self._step_begins()),
        )


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
