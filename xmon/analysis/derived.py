"""Derived numbers: pure functions of model values, no I/O, no clocks.

Units: seconds, bytes, FLOPs; ratios are 0-1. Every function returns ``None`` when an input it
needs is missing, so "unknown" never turns into a misleading 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from xmon.model import Program


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0-100), like numpy's default method."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def steps_per_second(window: Sequence[float]) -> float | None:
    """Throughput over a window of step durations (steps / total seconds)."""
    total = sum(window)
    if not window or total <= 0:
        return None
    return len(window) / total


def fragmentation_ratio(
    bytes_limit: int | None, bytes_in_use: int | None, largest_free_block: int | None
) -> float | None:
    """Share of free device memory not usable for one allocation: 1 - largest_free / free.

    0 means all free memory is one contiguous block; close to 1 means an allocation of the
    free size would fail although the bytes are there.
    """
    if bytes_limit is None or bytes_in_use is None or largest_free_block is None:
        return None
    free = bytes_limit - bytes_in_use
    if free <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - largest_free_block / free))


def program_total_flops(program: Program) -> float | None:
    """FLOPs of one execution over all its devices (cost analysis is per device)."""
    if program.flops is None:
        return None
    return program.flops * max(1, program.num_devices)


def program_total_bytes(program: Program) -> float | None:
    if program.bytes_accessed is None:
        return None
    return program.bytes_accessed * max(1, program.num_devices)


def achieved_rate(per_step: float | None, steps_per_s: float | None) -> float | None:
    """FLOP/s or bytes/s achieved: work per step times steps per second."""
    if per_step is None or steps_per_s is None:
        return None
    return per_step * steps_per_s


def utilization_ratio(achieved: float | None, peak: float | None) -> float | None:
    """Achieved / peak (MFU for FLOPs, bandwidth utilisation for bytes).

    Unknown peak (unknown device kind) gives None, never a guess; so does a ratio above 1:
    no device runs past its peak, so the work counted, the rate or the peak is wrong, and
    publishing the number would hide that (an unmarked step's programs counted from a short
    window, a peak table entry for the wrong variant of a chip).
    """
    if achieved is None or peak is None or peak <= 0:
        return None
    ratio = achieved / peak
    return ratio if ratio <= 1.0 else None


def arithmetic_intensity(flops: float | None, bytes_accessed: float | None) -> float | None:
    """FLOPs per byte of memory traffic."""
    if flops is None or not bytes_accessed:
        return None
    return flops / bytes_accessed


def bound_by(intensity: float | None, ridge_point: float | None) -> str | None:
    """Roofline verdict: "compute" above the ridge point, "memory" below it."""
    if intensity is None or ridge_point is None:
        return None
    return "compute" if intensity >= ridge_point else "memory"


def sum_known(values: Iterable[float | None]) -> float | None:
    """Sum of values if every one is known, else None (a partial sum would mislead)."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total
