"""Where every second of a process's wall time went: the account the agent keeps.

The process's life, from its start to now, is cut into buckets, each second in exactly one:

* ``compile``: jax tracing, lowering and XLA compiling (jax.monitoring's phase durations),
  inside steps or outside them;
* ``checkpoint_save`` / ``checkpoint_restore``: the time the job's thread was blocked in a
  checkpoint (Orbax's jax.monitoring durations, or a span the job marks with
  ``xmon.checkpointing``); an async save's background part overlaps training and is not
  badput;
* ``stall``: no step progress where steps were regular: the part of a step period (start to
  start) beyond the median, once the period passes the stall threshold;
* ``startup``: from the process's start to its first step (to its first compile where the job
  marks no steps), less the compiles and checkpoints in it;
* ``steps``: stepping, from the first step on; the daemon splits it with the device busy ratio
  into productive time and time the devices waited for the host (xmon.goodput.split);
* ``idle``: after the last step, once no step has begun for longer than the stall threshold
  (it becomes ``stall`` if steps begin again);
* ``unattributed``: what xmon cannot tell, e.g. the time before a late ``xmon.attach()`` in a
  job that had already imported jax.

Where spans overlap, the first kind in ``PRIORITY`` wins. Spans are kept as merged intervals;
a long-lived job's history is sealed into totals past ``MAX_INTERVALS`` per kind, so memory is
bounded whatever the job does.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

COMPILE = "compile"
CHECKPOINT_SAVE = "checkpoint_save"
CHECKPOINT_RESTORE = "checkpoint_restore"
STALL = "stall"
STARTUP = "startup"
STEPS = "steps"
IDLE = "idle"
UNATTRIBUTED = "unattributed"

# Spans, highest priority first: a compile inside a checkpoint counts as compile.
PRIORITY = (UNATTRIBUTED, COMPILE, CHECKPOINT_SAVE, CHECKPOINT_RESTORE, STALL)
BUCKETS = (STARTUP, COMPILE, STEPS, CHECKPOINT_SAVE, CHECKPOINT_RESTORE, STALL, IDLE, UNATTRIBUTED)

# A step period (start to start) longer than this many median periods is a stall, beyond the
# median; never below STALL_MIN_SECONDS (a 0.1 s-step job pausing 10 s has stalled, a 2 s job
# taking 3 s has not).
STALL_FACTOR = 10.0
STALL_MIN_SECONDS = 2.0
MAX_INTERVALS = 4096  # per kind; older intervals are sealed into totals
SEAL_LAG_SECONDS = 30.0  # each report folds the account up to this long ago into totals


def stall_threshold(median_period: float | None) -> float:
    return max(STALL_FACTOR * (median_period or 0.0), STALL_MIN_SECONDS)


@dataclass
class Intervals:
    """Disjoint, sorted [start, end) intervals; adding one merges what it touches."""

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def add(self, start: float, end: float) -> None:
        if end <= start:
            return
        left = bisect.bisect_left(self.ends, start)  # first that ends at or after our start
        right = bisect.bisect_right(self.starts, end)  # past the last that starts by our end
        if left < right:
            start = min(start, self.starts[left])
            end = max(end, self.ends[right - 1])
        self.starts[left:right] = [start]
        self.ends[left:right] = [end]

    def __len__(self) -> int:
        return len(self.starts)

    def clipped(self, start: float, end: float) -> list[tuple[float, float]]:
        """The intervals' parts inside [start, end)."""
        first = bisect.bisect_right(self.ends, start)
        out = []
        for s, e in zip(self.starts[first:], self.ends[first:], strict=True):
            if s >= end:
                break
            out.append((max(s, start), min(e, end)))
        return [(s, e) for s, e in out if e > s]

    def drop_before(self, time: float) -> None:
        """Forget what lies before ``time`` (an interval across it keeps its later part)."""
        cut = bisect.bisect_right(self.ends, time)
        del self.starts[:cut], self.ends[:cut]
        if self.starts and self.starts[0] < time:
            self.starts[0] = time


def _subtract(
    pieces: list[tuple[float, float]], holes: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``pieces`` less ``holes`` (both sorted and disjoint), in one pass over both."""
    out: list[tuple[float, float]] = []
    h = 0
    for start, end in pieces:
        cursor = start
        while h < len(holes) and holes[h][1] <= cursor:
            h += 1  # holes wholly before this piece
        k = h
        while k < len(holes) and holes[k][0] < end:
            h_start, h_end = holes[k]
            if h_start > cursor:
                out.append((cursor, h_start))
            cursor = max(cursor, h_end)
            if h_end > end:
                break  # this hole reaches into the next piece too
            k += 1
        h = k
        if cursor < end:
            out.append((cursor, end))
    return out


def _length(pieces: Iterable[tuple[float, float]]) -> float:
    return sum(end - start for start, end in pieces)


@dataclass(frozen=True)
class Stepping:
    """What the step clock says: the first step's begin (the first compile's start for a job
    that marks no steps), whether steps are marked, and the trailing state: the last step's
    end, whether a step is open, and the median period."""

    first: float | None = None
    marked: bool = False
    last_end: float | None = None
    open_since: float | None = None
    median_period: float | None = None


class Account:
    """The wall-time account of one process, on one clock (the agent's perf_counter)."""

    def __init__(self, process_start: float, unattributed_until: float | None = None) -> None:
        self.process_start = process_start
        self._spans = {kind: Intervals() for kind in PRIORITY}
        if unattributed_until is not None and unattributed_until > process_start:
            self._spans[UNATTRIBUTED].add(process_start, unattributed_until)
        self._sealed_at = process_start
        self._sealed: dict[str, float] = dict.fromkeys(BUCKETS, 0.0)
        self._sealed_idle = Intervals()  # where the sealed history was idle (rare, merged)
        self.stepping = Stepping()  # the step clock's latest state (the watcher sets it)

    def add_span(self, kind: str, start: float, end: float) -> None:
        """A span of ``kind`` (one of ``PRIORITY``). A part before the sealed history (a long
        compile reported at its end) is moved into ``kind`` from the bucket the history gave
        that time without spans: start-up before the first step, stepping after it."""
        start = max(start, self.process_start)
        if start < self._sealed_at:
            self._move_sealed(kind, start, min(end, self._sealed_at))
            start = self._sealed_at
        spans = self._spans[kind]
        spans.add(start, end)
        if len(spans) > MAX_INTERVALS:
            self._seal(spans.ends[len(spans) // 2])

    def seal(self, time: float) -> None:
        """Fold the account up to ``time`` into totals (each report seals all but the last
        ``SEAL_LAG_SECONDS``): the spans kept, and the work of each account, stay small."""
        if time > self._sealed_at:
            self._seal(time)

    def _move_sealed(self, kind: str, start: float, end: float) -> None:
        """Move [start, end) of the sealed history to ``kind``: from idle where it was idle
        then (a stall found when steps resumed), from start-up before the first step, else
        from stepping (a long compile reported at its end)."""
        idle = self._sealed_idle
        pieces = list(zip(idle.starts, idle.ends, strict=True))
        was_idle = _length(_intersect(pieces, [(start, end)]))
        if was_idle:
            left = _subtract(pieces, [(start, end)])
            idle.starts, idle.ends = [a for a, _ in left], [b for _, b in left]
        first = self.stepping.first
        before = max(0.0, min(end, first) - start) if first is not None else end - start
        rest = max(0.0, end - start - before - was_idle)
        for bucket, seconds in ((IDLE, was_idle), (STARTUP, before), (STEPS, rest)):
            moved = min(seconds, self._sealed[bucket])
            self._sealed[bucket] -= moved
            self._sealed[kind] += moved

    def buckets(self, now: float) -> dict[str, float]:
        """Seconds per bucket from the process's start to ``now``; they sum to the wall time."""
        totals = dict(self._sealed)
        for kind, seconds in _classify(self._spans, self._sealed_at, now, self.stepping).items():
            totals[kind] += seconds
        return totals

    def _seal(self, time: float) -> None:
        """Fold the account up to ``time`` into totals and forget its spans: a span reported
        later that reaches back before ``time`` keeps only its later part."""
        sealed = _classify(self._spans, self._sealed_at, time, self.stepping)
        for kind, seconds in sealed.items():
            self._sealed[kind] += seconds
        idle_start, idle_end = _phases(self._sealed_at, time, self.stepping).get(IDLE, (0, 0))
        self._sealed_idle.add(idle_start, idle_end)
        self._sealed_at = time
        for spans in self._spans.values():
            spans.drop_before(time)


def _classify(
    spans: Mapping[str, Intervals], start: float, now: float, stepping: Stepping
) -> dict[str, float]:
    """Seconds per bucket in [start, now): spans by priority, then the step clock's phases."""
    out = dict.fromkeys(BUCKETS, 0.0)
    if now <= start:
        return out
    free = [(start, now)]
    for kind in PRIORITY:
        taken = _intersect(free, spans[kind].clipped(start, now))
        out[kind] += _length(taken)
        free = _subtract(free, taken)
    for phase, (p_start, p_end) in _phases(start, now, stepping).items():
        out[phase] += _length(_intersect(free, [(p_start, p_end)]))
    return out


def _intersect(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _phases(start: float, now: float, stepping: Stepping) -> dict[str, tuple[float, float]]:
    """The free time's phases: start-up before the first step, stepping, then idle once the
    trailing gap passes the stall threshold. An open step past the threshold is a stall (it
    is added as a span by the watcher; here it stays stepping)."""
    first = stepping.first
    if first is None:
        return {STARTUP: (start, now)}
    first = max(first, start)
    active_until = now
    if (
        stepping.marked
        and stepping.open_since is None
        and stepping.last_end is not None
        and now - stepping.last_end > stall_threshold(stepping.median_period)
    ):
        active_until = max(first, stepping.last_end)
    return {
        STARTUP: (start, min(first, now)),
        STEPS: (first, active_until),
        IDLE: (active_until, now),
    }
