"""Step timing without device synchronisation.

A step's time is the interval between the starts of consecutive steps. JAX dispatches
asynchronously, so the time spent inside one step's Python code is often just dispatch; but
once the dispatch queue is full each step start waits for the device, and the start-to-start
interval equals the real step time. This needs no ``block_until_ready`` (which would slow the
job) and is exact on average. The first step has no predecessor and uses its own enter-to-exit
time (it usually includes compilation).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MAX_PENDING_STEPS = 4096


class StepTimer:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._local = threading.local()
        self._last_start: float | None = None
        self._pending: deque[float] = deque(maxlen=MAX_PENDING_STEPS)
        # Clock readings of recent step begins, for the execution sampler (xmon.agent.sampler)
        self.begin_times: deque[float] = deque(maxlen=MAX_PENDING_STEPS)
        self.steps_total = 0
        self.step_seconds_total = 0.0
        self.declared_flops_per_step: float | None = None
        self.declared_bytes_per_step: float | None = None

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
        self._local.started = now
        self.begin_times.append(now)
        with self._lock:
            previous, self._last_start = self._last_start, now
        if previous is not None:
            self._record(now - previous)
            self._local.recorded = True
        else:
            self._local.recorded = False
        return True

    def end(self) -> None:
        depth = getattr(self._local, "depth", 1) - 1
        self._local.depth = max(0, depth)
        if depth == 0 and not self._local.recorded:
            self._record(self._clock() - self._local.started)

    def _record(self, seconds: float) -> None:
        with self._lock:
            self.steps_total += 1
            self.step_seconds_total += seconds
            self._pending.append(seconds)

    def take_recent(self) -> list[float]:
        with self._lock:
            recent = list(self._pending)
            self._pending.clear()
        return recent

    @contextmanager
    def step(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        finally:
            self.end()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any) -> Any:
            self.begin()
            try:
                return fn(*args, **kwargs)
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
