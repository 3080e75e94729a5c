"""The agent's side of the wall-time account (xmon.goodput.account): it feeds the account from
jax.monitoring (compile phases, Orbax's checkpoint durations), the spans the job marks with
``xmon.checkpointing``, and the step clock, and sends the buckets with each report.

Listeners run on the job's threads inside jax calls: each does O(1) work under a lock and never
raises. The step clock is read on the agent's own thread, once per report.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from xmon.agent.steps import StepTimer
from xmon.goodput.account import (
    CHECKPOINT_RESTORE,
    CHECKPOINT_SAVE,
    COMPILE,
    SEAL_LAG_SECONDS,
    STALL,
    Account,
    Stepping,
    stall_threshold,
)
from xmon.wire.proto import xmon_pb2

# jax's compile phases, each reported at its end with its duration.
COMPILE_PHASES = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)
# Orbax's durations of the time the calling thread was blocked (orbax-checkpoint 0.12): a sync
# save's whole call, an async save's blocking part (its background commit overlaps training),
# a restore. Overlapping spans of one kind merge, so a blocking part inside a total is counted
# once.
CHECKPOINT_EVENTS = {
    "/jax/orbax/write/total_duration_secs": CHECKPOINT_SAVE,
    "/jax/orbax/write/blocking_duration_secs": CHECKPOINT_SAVE,
    "/jax/checkpoint/write/async/blocking_duration_secs": CHECKPOINT_SAVE,
    "/jax/orbax/read/total_duration_secs": CHECKPOINT_RESTORE,
    "/jax/orbax/read/blocking_duration_secs": CHECKPOINT_RESTORE,
    "/jax/orbax/read/async/blocking_duration_secs": CHECKPOINT_RESTORE,
}
SPAN_KINDS = {"save": CHECKPOINT_SAVE, "restore": CHECKPOINT_RESTORE}


def span_kind(what: str) -> str:
    """The bucket of ``xmon.checkpointing(what)``; ValueError for anything but save/restore."""
    kind = SPAN_KINDS.get(what)
    if kind is None:
        raise ValueError(f"xmon.checkpointing: what must be 'save' or 'restore', got {what!r}")
    return kind


RECENT_PERIODS = 65  # the step periods the median comes from


def process_start_wall() -> float | None:
    """When this process started (wall clock), from the kernel via psutil."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no start time: the account starts at attach
        return None


class GoodputWatch:
    def __init__(
        self,
        timer: StepTimer,
        started_wall: float | None,
        ran_jax_before: bool,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``started_wall`` is the process's start (None: unknown, the account starts now);
        ``ran_jax_before``: the job had created a backend before the agent attached, so what
        happened before is not known (unattributed)."""
        self._timer = timer
        self._clock = clock
        self._wall = wall
        now, now_wall = clock(), wall()
        self._offset = now_wall - now  # wall = clock + offset
        start = now if started_wall is None else min(now, started_wall - self._offset)
        self.account = Account(start, unattributed_until=now if ran_jax_before else None)
        self._lock = threading.Lock()
        self._first_compile: float | None = None
        self._begun_seen = 0  # timer.steps_begun when the begins were last read
        self._last_begin: float | None = None
        self._periods: list[float] = []

    # -- listeners (job threads) --------------------------------------------------------------
    def on_duration(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        try:
            kind = COMPILE if event in COMPILE_PHASES else CHECKPOINT_EVENTS.get(event)
            if kind is None:
                return
            end = self._clock()
            start = end - max(0.0, float(duration_secs))
            with self._lock:
                self.account.add_span(kind, start, end)
                if kind == COMPILE and self._first_compile is None:
                    self._first_compile = start
        except Exception:  # noqa: BLE001 - never raise into the job's jax call
            pass

    @contextmanager
    def span(self, what: str) -> Iterator[None]:
        """``with xmon.checkpointing("save"):`` around a checkpoint written by other means."""
        kind = span_kind(what)
        start = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self.account.add_span(kind, start, self._clock())

    # -- the agent's thread ------------------------------------------------------------------
    def report(self) -> xmon_pb2.GoodputAccount:
        now = self._clock()
        with self._lock:
            stepping = self._read_steps(now)
            self.account.stepping = stepping
            self.account.seal(now - SEAL_LAG_SECONDS)
            buckets = self.account.buckets(now)
        account = xmon_pb2.GoodputAccount(
            process_started_at=self.account.process_start + self._offset,
            as_of=now + self._offset,
            seconds=buckets,
            steps_marked=stepping.marked,
        )
        if stepping.marked and stepping.first is not None:
            account.first_step_at = stepping.first + self._offset
        if stepping.last_end is not None:
            account.last_step_at = stepping.last_end + self._offset
        return account

    def _read_steps(self, now: float) -> Stepping:
        """Fold the step begins since the last report: each period past the stall threshold
        adds a stall span beyond the median; so does an open step that has run past it.

        Only a report whose steps include a period past the threshold (the timer keeps the
        longest) walks every begin since the last one; the others read the latest
        ``RECENT_PERIODS`` + 1, whatever the step rate: folding a second of 1,765 begins cost
        the agent's thread about 0.5 ms a report, most of its work."""
        timer = self._timer
        median = statistics.median(self._periods) if self._periods else None
        longest = timer.longest_period_since_read()
        stalled = median is not None and longest > stall_threshold(median)
        latest = None if stalled else RECENT_PERIODS + 1
        begun, begins, _ = timer.begins_since(self._begun_seen, latest)
        if len(begins) < begun - self._begun_seen:
            # begins between the last report's and these are not here: left out by ``latest``,
            # or past what the timer keeps
            self._last_begin = None
        self._begun_seen = begun
        if begins:
            self._fold_periods(begins, median)
        median = statistics.median(self._periods) if self._periods else None
        open_for = timer.open_step_seconds()
        if open_for is not None and open_for > stall_threshold(median):
            self.account.add_span(STALL, now - open_for + (median or 0.0), now)
        last_end = timer.last_end()
        first = timer.first_begin() if timer.marked else self._first_compile
        return Stepping(
            first=first,
            marked=timer.marked,
            last_end=last_end,
            open_since=None if open_for is None else now - open_for,
            median_period=median,
        )

    def _fold_periods(self, begins: list[float], median: float | None) -> None:
        """The periods ending at ``begins``: each past the stall threshold is a stall beyond
        the median; the others are the steps' (the last ``RECENT_PERIODS`` kept). Only a
        report with a stall among its steps folds all of them (:meth:`_read_steps`); only the
        stalls take a Python loop."""
        starts = [self._last_begin, *begins] if self._last_begin is not None else begins
        self._last_begin = begins[-1]
        periods = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        if not periods:
            return
        threshold = stall_threshold(median) if median is not None else None
        if threshold is not None and max(periods) > threshold:
            assert median is not None
            for begin, period in zip(starts, periods, strict=False):
                if period > threshold:
                    self.account.add_span(STALL, begin + median, begin + period)
            periods = [p for p in periods if p <= threshold]  # a stall is not a step period
        self._periods.extend(periods[-RECENT_PERIODS:])
        del self._periods[:-RECENT_PERIODS]
