"""The daemon's side of the wall-time account: the agent's ``steps`` seconds split into
productive time and time the devices waited for the host, goodput ratios over the life and
over rolling windows.

Stepping time is split by the devices' busy share of the job's stepping over its whole life,
averaged over the devices the step uses. With step markers the share is their busy seconds per
step, in the whole steps the execution ledger's samples held (xmon.execution.ledger
``holds_marked_steps``), times the steps marked, over the stepping time
(xmon.execution.rates.marked_step_busy_share: the profiler slows the host side inside samples,
not the devices' work); without, their busy share in the samples taken through the stepping
(``stepped_through``, xmon.execution.rates.step_busy_ratio). Samples are taken at a steady
pace, so over a job's life their mean is the time-weighted one. Before any such sample the
seconds are ``steps_unmeasured``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from xmon.goodput.account import BUCKETS, STEPS
from xmon.model import GOODPUT_BUCKETS, Goodput

WINDOWS = (("5m", 300.0), ("1h", 3600.0))
HISTORY_EVERY_SECONDS = 10.0
HISTORY_POINTS = 3600 // 10 + 2  # an hour at one point per 10 s, and both ends


@dataclass
class GoodputSplit:
    """One process's split, fed each report's account (seconds per agent bucket)."""

    busy_share: float | None = None  # the latest busy share of stepping (None: not measured)
    _history: deque[tuple[float, float, float]] = field(
        default_factory=lambda: deque(maxlen=HISTORY_POINTS)
    )  # (wall seconds, productive seconds, as_of) thinned to one per 10 s

    def update(
        self,
        agent_seconds: Mapping[str, float],
        wall_seconds: float,
        as_of: float,
        busy_ratio: float | None,
        steps_marked: bool = True,
    ) -> Goodput:
        """``busy_ratio``: the devices' busy share of the job's stepping so far, or None where
        no sample has measured it (the last share known is kept)."""
        if busy_ratio is not None and math.isfinite(busy_ratio):
            self.busy_share = min(1.0, max(0.0, busy_ratio))
        steps = _seconds(agent_seconds, STEPS)
        seconds = {name: _seconds(agent_seconds, name) for name in BUCKETS}
        del seconds[STEPS]
        share = self.busy_share
        if share is not None:
            seconds["productive"] = steps * share
            seconds["host_wait"] = steps - seconds["productive"]
        else:
            seconds["steps_unmeasured"] = steps
        productive = seconds.get("productive")
        self._remember(wall_seconds, productive or 0.0, as_of)
        badput = {k: v for k, v in seconds.items() if k != "productive" and v > 0}
        measured = share is not None
        return Goodput(
            wall_seconds=wall_seconds,
            seconds=tuple((name, seconds.get(name, 0.0)) for name in GOODPUT_BUCKETS),
            ratio=_ratio(productive, wall_seconds) if measured else None,
            ratio_5m=self._window_ratio(WINDOWS[0][1]) if measured else None,
            ratio_1h=self._window_ratio(WINDOWS[1][1]) if measured else None,
            biggest_badput=max(badput, key=badput.__getitem__) if badput else None,
            steps_marked=steps_marked,
        )

    def _remember(self, wall: float, productive: float, as_of: float) -> None:
        """Keep points at least ``HISTORY_EVERY_SECONDS`` apart, and the newest."""
        history, point = self._history, (wall, productive, as_of)
        if history and as_of < history[-1][2]:
            history.clear()  # a clock gone back: the windows start again
        if len(history) >= 2 and history[-1][2] - history[-2][2] < HISTORY_EVERY_SECONDS:
            history[-1] = point
        else:
            history.append(point)

    def _window_ratio(self, seconds: float) -> float | None:
        """Productive share over the last ``seconds`` of the account: from the newest point
        at least that old (the process's start where none is)."""
        if not self._history:
            return None
        wall, productive, as_of = self._history[-1]
        base = (0.0, 0.0)
        for then_wall, then_productive, then_as_of in reversed(self._history):
            if as_of - then_as_of >= seconds:
                base = (then_wall, then_productive)
                break
        return _ratio(productive - base[1], wall - base[0])


def _seconds(agent_seconds: Mapping[str, float], name: str) -> float:
    """A bucket's seconds as sent: an unknown, negative or non-finite value counts 0."""
    value = agent_seconds.get(name, 0.0)
    return value if math.isfinite(value) and value > 0 else 0.0


def _ratio(part: float | None, whole: float) -> float | None:
    if part is None or whole <= 0:
        return None
    return min(1.0, max(0.0, part / whole))
