"""Every thread's Python stack, sent while the job has not finished a step for long.

Taken by the agent's reporter thread from every thread's frame (xmon.agent.internals): no signal
reaches the job, and nothing runs on the stuck thread. The stall rule is xmon.analysis.stall's,
on the step timer's clock; stacks are read at most every ``REFRESH_SECONDS`` and the text is re-
sent with each report while the stall lasts (the daemon keeps only the latest report).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import traceback
from collections.abc import Callable

from xmon.agent import internals
from xmon.agent.in_flight import jitted_call
from xmon.agent.steps import StepTimer
from xmon.analysis.stall import stalled
from xmon.wire.proto import xmon_pb2

MAX_STACK_BYTES = 64 * 1024
MAX_FRAMES = 40  # innermost frames shown per thread
REFRESH_SECONDS = 10.0


class StallWatch:
    def __init__(self, timer: StepTimer, clock: Callable[[], float] = time.perf_counter) -> None:
        self._timer = timer
        self._clock = clock  # the step timer's clock
        self._stacks = ""
        self._in_program = ""  # read with the stacks
        self._taken_at: float | None = None

    def report(self) -> xmon_pb2.StallReport | None:
        """A StallReport while stalled, else None (and the cached stacks are dropped)."""
        last_end, intervals = self._timer.last_step()
        now = self._clock()
        median = statistics.median(intervals) if intervals else None
        if last_end is None or not stalled(now - last_end, median):
            self._stacks, self._taken_at = "", None
            return None
        if self._taken_at is None or now - self._taken_at >= REFRESH_SECONDS:
            self._stacks, self._taken_at = thread_stacks(), now
            self._in_program = jitted_call(self._timer.step_thread)
        return xmon_pb2.StallReport(
            seconds_since_step=now - last_end,
            median_step_seconds=median or 0.0,
            stacks=self._stacks,
            step_thread_waits_in=waits_in(self._timer.step_thread),
            step_thread_in_program=self._in_program,
        )


_JAX_PACKAGES = tuple(f"{os.sep}{name}{os.sep}" for name in ("jax", "jaxlib"))


def waits_in(thread: int | None) -> str:
    """Where a thread is now: "jax" when its innermost Python frame is in jax or jaxlib
    (blocked on the device or in a collective, waiting for other processes), "host" when in
    other code (a lock, I/O, a data loader), "" when the thread is unknown or gone.

    In a hung multi-process job, the processes waiting in jax are waiting for one that is not:
    this is what names the process that stopped first."""
    if thread is None:
        return ""
    frame = internals.thread_frames().get(thread)
    if frame is None:
        return ""
    return "jax" if any(p in frame.f_code.co_filename for p in _JAX_PACKAGES) else "host"


def thread_stacks(skip: int | None = None) -> str:
    """Each thread's stack, main thread first, blocks separated by a blank line."""
    me = threading.get_ident() if skip is None else skip
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = internals.thread_frames()
    main = threading.main_thread().ident
    order = sorted(frames, key=lambda ident: (ident != main, names.get(ident, "")))
    blocks = []
    for ident in order:
        if ident == me:
            continue
        lines = traceback.format_stack(frames[ident])[-MAX_FRAMES:]
        blocks.append(f"Thread {names.get(ident, '?')} ({ident}):\n" + "".join(lines).rstrip())
    return "\n\n".join(blocks).encode()[:MAX_STACK_BYTES].decode(errors="ignore")
