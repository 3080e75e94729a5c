"""Derived numbers (xmon.analysis.derived): pure functions, table-driven."""

from __future__ import annotations

import pytest

from xmon.analysis import derived


@pytest.mark.parametrize(
    ("achieved", "peak", "expected"),
    [
        (5e11, 1e12, 0.5),
        (1e12, 1e12, 1.0),
        (0.0, 1e12, 0.0),
        (1.18e12, 1e12, None),  # above the peak: something counted is wrong, not shown
        (None, 1e12, None),
        (5e11, None, None),  # unknown device kind: no guess
        (5e11, 0.0, None),
    ],
)
def test_utilization_is_a_share_of_the_peak_or_absent(
    achieved: float | None, peak: float | None, expected: float | None
) -> None:
    assert derived.utilization_ratio(achieved, peak) == expected


@pytest.mark.parametrize(
    ("per_step", "rate", "expected"), [(1e9, 2.0, 2e9), (None, 2.0, None), (1e9, None, None)]
)
def test_achieved_rate_is_work_per_step_times_steps_per_second(
    per_step: float | None, rate: float | None, expected: float | None
) -> None:
    assert derived.achieved_rate(per_step, rate) == expected
