"""Step timing without device synchronisation.

A step's time is the interval between the starts of consecutive steps. JAX dispatches
asynchronously, so the time spent inside one step's Python code is often just dispatch; but
once the dispatch queue is full each step start waits for the device, and the start-to-start
interval equals the real step time. This needs no ``block_until_ready`` (which would slow the
job) and is exact on average.

Totals add up to the job's own clock: ``step_seconds_total`` runs from the first step's start
to the last finished step's end (the start-to-start intervals of every step but the last, plus
the last step's own start-to-end time), and ``steps_total`` counts finished steps. The recent
window for percentiles holds start-to-start intervals, each recorded once its successor
begins.

The timer also knows whether a step is open on any thread, and calls a boundary listener when
the last open step ends: memory readings are taken there, never mid-step.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

MAX_PENDING_STEPS = 4096


class StepTimer:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._local = threading.local()
        self._first_start: float | None = None
        self._last_start: float | None = None
        self._last_end: float | None = None
        self._pending: deque[float] = deque(maxlen=MAX_PENDING_STEPS)
        self._longest_unread = 0.0  # the longest step period since longest_period_since_read
        # Clock readings of recent step begins, for the execution sampler (xmon.agent.sampler)
        self.begin_times: deque[float] = deque(maxlen=MAX_PENDING_STEPS)
        self._open = 0  # steps open on all threads together
        self._open_since: float | None = None  # clock reading when the open steps began
        self.steps_begun = 0
        self.step_thread: int | None = None  # thread ident of the latest outermost begin
        self.boundaries = 0  # bumped at every outermost begin and end: a reading spanning a
        # change saw a step boundary pass
        self.boundary_listener: Callable[[], None] | None = None
        # Told of an exception leaving a step (xmon.agent.oom looks for out of memory there)
        self.exception_listener: Callable[[BaseException], None] | None = None
        self.steps_total = 0
        self.declared_flops_per_step: float | None = None
        self.declared_bytes_per_step: float | None = None
        self._step_context = _Step(self)
        self.tracing: Callable[[], bool] = bool  # set by the agent (tracing_probe)

    @property
    def step_seconds_total(self) -> float:
        return self.totals()[1]

    def totals(self) -> tuple[int, float]:
        """Finished steps, and the first step's start to the last finished step's end."""
        with self._lock:
            if self._first_start is None or self._last_end is None:
                return self.steps_total, 0.0
            return self.steps_total, self._last_end - self._first_start

    def begins_since(self, seen: int, latest: int | None = None) -> tuple[int, list[float], bool]:
        """Steps begun so far, the clock readings of the begins after the ``seen``-th (oldest
        first; at most the ``latest`` of them), and whether the timer still holds all of them
        (it keeps the latest ``MAX_PENDING_STEPS``), read together. Costs what the begins
        returned are, not the window."""
        with self._lock:
            begun, times = self.steps_begun, self.begin_times
            fresh = max(0, begun - seen)
            held = min(fresh, len(times))
            kept = held if latest is None else min(held, latest)
            newest = list(itertools.islice(reversed(times), kept))
        newest.reverse()
        return begun, newest, held == fresh

    def longest_period_since_read(self) -> float:
        """The longest interval between consecutive step begins since the last call (0.0 with
        none): one reader (the wall-time account) learns whether any step period passed its
        stall threshold without walking thousands of begins a second."""
        with self._lock:
            longest, self._longest_unread = self._longest_unread, 0.0
        return longest

    def first_begin(self) -> float | None:
        """Clock reading of the first step's begin (None before one)."""
        return self._first_start

    @property
    def marked(self) -> bool:
        """Whether the job has ever marked a step."""
        return self._first_start is not None

    def last_step(self) -> tuple[float | None, tuple[float, ...]]:
        """Clock reading of the last step's end (None before one ended), and the intervals
        between the latest 65 step begins: what the stall rule (xmon.analysis.stall) reads."""
        with self._lock:
            begins = list(itertools.islice(reversed(self.begin_times), 65))
            last_end = self._last_end
        begins.reverse()
        return last_end, tuple(b - a for a, b in zip(begins, begins[1:], strict=False))

    def last_end(self) -> float | None:
        """Clock reading of the last step's end (None before one ended)."""
        return self._last_end

    def open_steps(self) -> int:
        return self._open

    def open_step_seconds(self) -> float | None:
        """How long the step open now has run (since steps were last all closed); None when
        no step is open."""
        since = self._open_since
        return None if since is None else max(0.0, self._clock() - since)

    def in_step(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def begin(self) -> bool:
        """Start a step on this thread; nested steps (a StepTraceAnnotation inside
        ``xmon.step``) count once. Returns whether this call opened the step."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth:
            return False
        now = self._clock()
        with self._lock:
            previous, self._last_start = self._last_start, now
            if previous is None:
                self._first_start = now
            else:
                period = now - previous
                self._pending.append(period)
                if period > self._longest_unread:
                    self._longest_unread = period
            if not self._open:
                self._open_since = now
            self._open += 1
            self.steps_begun += 1
            self.boundaries += 1
            self.begin_times.append(now)
        self.step_thread = threading.get_ident()
        return True

    def end(self) -> None:
        depth = getattr(self._local, "depth", 1) - 1
        self._local.depth = depth if depth > 0 else 0
        if depth != 0:
            return
        now = self._clock()
        with self._lock:
            if self._last_end is None or now > self._last_end:
                self._last_end = now
            self.steps_total += 1
            if self._open > 0:
                self._open -= 1
            self.boundaries += 1
            at_rest = self._open == 0
            if at_rest:
                self._open_since = None
        listener = self.boundary_listener
        if at_rest and listener is not None:
            try:
                listener()
            except Exception:  # noqa: BLE001 - a reading that fails must not fail the step
                pass

    def take_recent(self) -> list[float]:
        with self._lock:
            recent = list(self._pending)
            self._pending.clear()
        return recent

    def failed(self, exc: BaseException | None) -> None:
        """An exception left a step (on the failing thread, before it goes on)."""
        listener = self.exception_listener
        if exc is not None and listener is not None:
            listener(exc)

    def step(self) -> _Step:
        """``with timer.step():`` — one reusable context object (no generator per step: a step
        of a millisecond has ~2 µs to spare, see docs/benchmarks.md)."""
        return self._step_context

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any) -> Any:
            self.begin()
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                self.failed(exc)
                raise
            finally:
                self.end()

        return stepped


class StepAnnotationHook:
    """Counts ``jax.profiler.StepTraceAnnotation`` blocks as steps, so code already marked for
    the profiler gets step metrics with no change."""

    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer
        self._cls: Any = None

    def install(self) -> None:
        import jax.profiler

        cls = jax.profiler.StepTraceAnnotation
        if "__enter__" in cls.__dict__ or "__exit__" in cls.__dict__:
            return  # already customised by someone else: leave it alone
        timer = self._timer
        base_enter, base_exit = cls.__enter__, cls.__exit__

        def __enter__(annotation: Any) -> Any:
            result = base_enter(annotation)
            try:
                timer.begin()
            except Exception:  # noqa: BLE001 - never break the user's step
                pass
            return result

        def __exit__(annotation: Any, *exc: Any) -> Any:
            try:
                timer.failed(exc[1] if len(exc) > 1 else None)
                timer.end()
            except Exception:  # noqa: BLE001
                pass
            return base_exit(annotation, *exc)

        cls.__enter__, cls.__exit__ = __enter__, __exit__
        self._cls = cls

    def uninstall(self) -> None:
        if self._cls is not None:
            for name in ("__enter__", "__exit__"):
                if name in self._cls.__dict__:
                    delattr(self._cls, name)
            self._cls = None


class _Step:
    """The context of ``with xmon.step():``: stateless (the depth is the timer's, per thread),
    so one object serves every step on every thread.

    While a profiler trace records (``xmon capture``, the job's own ``jax.profiler`` trace), the
    outermost step is also a ``jax.profiler.StepTraceAnnotation``, so XProf's step-based tools
    (the overview's step times, the input pipeline analysis) see the steps xmon sees. Creating
    one costs ~1.6 µs, so it is made only while a trace records (asking costs ~0.1 µs)."""

    __slots__ = ("_timer",)

    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer

    def __enter__(self) -> None:
        timer = self._timer
        if timer.begin() and timer.tracing():
            annotation = _annotation(timer.steps_begun - 1)
            if annotation is not None:  # closed by the exit at this depth, not a nested one's
                timer._local.annotation = (annotation, timer._local.depth)

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> None:
        timer = self._timer
        held = getattr(timer._local, "annotation", None)
        if held is not None and held[1] == timer._local.depth:
            timer._local.annotation = None
            try:
                held[0].__exit__(kind, exc, traceback)
            except Exception:  # noqa: BLE001 - the step's own outcome comes first
                pass
        if exc is not None:
            timer.failed(exc)
        timer.end()


def tracing_probe() -> Callable[[], bool]:
    """Whether a profiler trace records now: ``TraceAnnotation.is_enabled``, a public class's
    method, called as it is (0.1 µs); one that always says no where this jax lacks it."""
    try:
        import jax.profiler

        probe = jax.profiler.TraceAnnotation.is_enabled
        probe()
        return probe  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001
        return bool


def _annotation(step_number: int) -> Any:
    """An entered ``StepTraceAnnotation("train", step_num=...)``, or None if it failed."""
    try:
        import jax.profiler

        annotation = jax.profiler.StepTraceAnnotation("train", step_num=step_number)
        annotation.__enter__()
        return annotation
    except Exception:  # noqa: BLE001 - never break the user's step
        return None
