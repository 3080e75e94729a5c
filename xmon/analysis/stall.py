"""The stall rule the agent and the daemon share: no step has finished for
``max(STALL_FACTOR x median step, STALL_MIN_SECONDS)``. The agent applies it to its own step
clock (and sends the threads' stacks, xmon.agent.stall); the daemon's detector
(:mod:`xmon.findings.stall`) to the time since the job's step count last moved.
"""

from __future__ import annotations

STALL_FACTOR = 10.0
STALL_MIN_SECONDS = 20.0


def stall_threshold(median_step_seconds: float | None) -> float:
    median = median_step_seconds or 0.0
    return max(STALL_FACTOR * median, STALL_MIN_SECONDS)


def stalled(seconds_since_step: float, median_step_seconds: float | None) -> bool:
    return seconds_since_step > stall_threshold(median_step_seconds)
