"""Stall / hang: no step has finished for ``max(STALL_FACTOR x median step, STALL_MIN_SECONDS)``
(:mod:`xmon.analysis.stall`).

The agent applies the same rule to its own step clock and then sends every thread's Python
stack (xmon.agent.stall); the daemon's detector measures the time since the job's step count
last moved on its own clock, so a job whose agent is stuck too still shows the stall.
"""

from __future__ import annotations

from xmon.analysis.stall import stall_threshold
from xmon.model import Finding

STALL_ERROR_FACTOR = 5.0  # this many thresholds without a step: an error


def detect_stall(
    seconds_since_step: float | None,
    median_step_seconds: float | None,
    steps_total: int,
    since: float,
    stacks: str = "",
    last_program: tuple[str, str] | None = None,
) -> Finding | None:
    """A finding once a job that has stepped (``steps_total`` > 0) has not finished a step
    for longer than the threshold; ``stacks`` are the agent's thread stacks, when sent, and
    ``last_program`` the program last dispatched with where that is known from
    (:func:`last_dispatched`)."""
    if steps_total <= 0 or seconds_since_step is None:
        return None
    threshold = stall_threshold(median_step_seconds)
    if seconds_since_step <= threshold:
        return None
    error = seconds_since_step > STALL_ERROR_FACTOR * threshold
    median = f"{median_step_seconds:.3g} s" if median_step_seconds else "unknown"
    waiting = _innermost_wait(stacks)
    return Finding(
        kind="stall",
        severity="error" if error else "warning",
        summary=f"no step has finished for {seconds_since_step:.0f} s "
        f"(median step {median})" + (f"; main thread in {waiting}" if waiting else ""),
        since=since,
        evidence=(
            ("seconds since last step", f"{seconds_since_step:.1f}"),
            ("median step seconds", median),
            ("threshold seconds", f"{threshold:.1f}"),
            ("steps finished", str(steps_total)),
            (
                "last program dispatched",
                f"{last_program[0]} ({last_program[1]})" if last_program else "unknown",
            ),
            ("thread stacks", "below" if stacks else "not sent by the agent"),
        ),
        fix="Read the main thread's stack below: a lock or queue wait (data loader, "
        "checkpoint, another process in a collective), a blocking I/O call, or a device "
        "computation that does not finish. py-spy dump --pid PID shows it again.",
        value=seconds_since_step,
        detail=stacks,
    )


def last_dispatched(
    in_program: str, ledger_program: str | None, ledger_seen_at: float | None, wall: float
) -> tuple[str, str] | None:
    """The program a stalled job last dispatched, and how that is known. JAX dispatches from
    C++ with no hook, so two honest sources, best first: the jitted call the stepping thread
    is inside now (the agent reads it off the thread's stack: a stall inside a computation,
    such as a host callback that blocks), else the program the execution ledger last saw start
    an execution (a stall between computations: a lock, a loader, I/O)."""
    if in_program:
        return in_program, "the stepping thread is inside this call now, from its stack"
    if ledger_program:
        ago = f", {wall - ledger_seen_at:.0f} s ago" if ledger_seen_at else ""
        return ledger_program, f"the last the execution ledger saw start{ago}"
    return None


def _innermost_wait(stacks: str) -> str | None:
    """The innermost frame of the main thread's stack, e.g. 'threading.py:327 wait'."""
    lines = stacks.split("\n\n")[0].splitlines() if stacks else []
    if not lines or "MainThread" not in lines[0]:
        return None
    frames = [line.strip() for line in lines if line.strip().startswith("File ")]
    if not frames:
        return None
    last = frames[-1]  # File "/usr/lib/python3.11/threading.py", line 327, in wait
    try:
        path, line, name = (part.strip() for part in last.split(",", 2))
        return f"{path.split('/')[-1].rstrip(chr(34))}:{line.split()[-1]} {name.split()[-1]}"
    except ValueError:
        return None
