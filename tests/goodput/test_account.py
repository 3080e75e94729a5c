"""The wall-time account (xmon.goodput.account) on timelines written out by hand: every second
in exactly one bucket, spans by priority, start-up, stepping, stalls and the idle tail."""

from __future__ import annotations

import random

import pytest

from xmon.goodput.account import (
    BUCKETS,
    MAX_INTERVALS,
    Account,
    Intervals,
    Stepping,
    stall_threshold,
)


def nonzero(buckets: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in buckets.items() if v}


def test_intervals_merge_what_they_touch_and_clip() -> None:
    spans = Intervals()
    for start, end in [(5, 6), (1, 2), (1.5, 3), (10, 11), (2.5, 5.5), (7, 7)]:
        spans.add(start, end)
    assert list(zip(spans.starts, spans.ends, strict=True)) == [(1, 6), (10, 11)]
    assert spans.clipped(0, 10.5) == [(1, 6), (10, 10.5)]
    assert spans.clipped(6, 10) == []
    spans.drop_before(3)
    assert list(zip(spans.starts, spans.ends, strict=True)) == [(3, 6), (10, 11)]


def random_intervals(
    rng: random.Random, count: int, span: int, longest: int
) -> tuple[Intervals, set[int]]:
    """``count`` random spans added one by one, and the whole seconds they cover."""
    spans, covered = Intervals(), set()
    for _ in range(count):
        start = rng.randrange(0, span)
        end = start + rng.randrange(0, longest)
        spans.add(start, end)
        covered.update(range(start, end))
    return spans, covered


def test_intervals_match_a_set_of_seconds_on_random_spans() -> None:
    spans, covered = random_intervals(random.Random(7), 300, 1000, 30)
    assert sum(e - s for s, e in zip(spans.starts, spans.ends, strict=True)) == len(covered)
    assert all(a < b for a, b in zip(spans.ends, spans.starts[1:], strict=False))


def test_before_the_first_step_it_is_start_up_less_compiles() -> None:
    account = Account(process_start=100.0)
    account.add_span("compile", 105.0, 107.0)
    assert nonzero(account.buckets(110.0)) == {"startup": 8.0, "compile": 2.0}


def test_a_marked_job_s_timeline() -> None:
    """5 s start-up, a 2 s warm-up compile in the first step, steps of 0.1 s, a 3 s save
    between steps, a 10 s stall between two steps, steps again, then 30 s idle."""
    account = Account(process_start=0.0)
    account.add_span("compile", 5.0, 7.0)
    account.add_span("checkpoint_save", 20.0, 23.0)
    account.add_span("stall", 40.1, 50.0)  # the watcher's span: the period beyond the median
    account.stepping = Stepping(first=5.0, marked=True, last_end=60.0,
                                median_period=0.1)  # fmt: skip
    buckets = account.buckets(90.0)
    assert nonzero(buckets) == {"startup": 5.0, "compile": 2.0, "checkpoint_save": 3.0,
                                "stall": 9.9, "steps": 40.1, "idle": 30.0}  # fmt: skip
    assert sum(buckets.values()) == pytest.approx(90.0)
    assert set(buckets) == set(BUCKETS)


def test_the_tail_is_steps_until_it_passes_the_stall_threshold() -> None:
    account = Account(process_start=0.0)
    account.stepping = Stepping(first=1.0, marked=True, last_end=10.0,
                                median_period=0.1)  # fmt: skip
    threshold = stall_threshold(0.1)
    assert threshold == 2.0  # never below 2 s
    assert nonzero(account.buckets(10.0 + threshold)) == {"startup": 1.0, "steps": 11.0}
    assert nonzero(account.buckets(15.0)) == {"startup": 1.0, "steps": 9.0, "idle": 5.0}
    # a step open for long is not idle: the watcher adds its stall
    account.stepping = Stepping(first=1.0, marked=True, last_end=10.0,
                                open_since=10.0, median_period=0.1)  # fmt: skip
    assert nonzero(account.buckets(15.0)) == {"startup": 1.0, "steps": 14.0}


def test_spans_overlap_by_priority_and_sum_to_wall_time() -> None:
    account = Account(process_start=0.0, unattributed_until=2.0)
    account.add_span("checkpoint_restore", 1.0, 6.0)
    account.add_span("compile", 4.0, 8.0)
    account.add_span("stall", 7.0, 12.0)
    account.add_span("checkpoint_save", 11.0, 13.0)
    account.stepping = Stepping(first=3.0, marked=True, last_end=14.0, median_period=1.0)
    buckets = account.buckets(14.0)
    assert nonzero(buckets) == {"unattributed": 2.0, "checkpoint_restore": 2.0, "compile": 4.0,
                                "stall": 3.0, "checkpoint_save": 2.0, "steps": 1.0}  # fmt: skip
    assert sum(buckets.values()) == pytest.approx(14.0)


def test_a_job_without_markers_steps_from_its_first_compile() -> None:
    account = Account(process_start=0.0)
    account.add_span("compile", 3.0, 4.0)
    account.stepping = Stepping(first=3.0, marked=False)
    # no step clock: a long quiet time is never called idle
    assert nonzero(account.buckets(100.0)) == {"startup": 3.0, "compile": 1.0, "steps": 96.0}


def test_a_long_history_is_sealed_into_totals_and_stays_exact() -> None:
    """A compile every second for more than MAX_INTERVALS seconds: memory stays bounded and
    every second is still counted once."""
    account = Account(process_start=0.0)
    account.stepping = Stepping(first=0.5, marked=True, last_end=0.0, median_period=1.0)
    n = 3 * MAX_INTERVALS
    for i in range(n):
        account.add_span("compile", i + 0.5, i + 0.75)
        account.stepping = Stepping(first=0.5, marked=True, last_end=i + 1.0, median_period=1.0)
    assert all(len(spans) <= MAX_INTERVALS for spans in account._spans.values())
    buckets = account.buckets(float(n))
    assert buckets["compile"] == pytest.approx(0.25 * n)
    assert buckets["startup"] == pytest.approx(0.5)
    assert buckets["steps"] == pytest.approx(n - 0.5 - 0.25 * n)
    assert sum(buckets.values()) == pytest.approx(n)


def test_a_span_before_the_process_started_counts_from_its_start() -> None:
    account = Account(process_start=10.0)
    account.add_span("compile", 5.0, 12.0)
    assert nonzero(account.buckets(12.0)) == {"compile": 2.0}
    assert nonzero(account.buckets(9.0)) == {}


def test_interval_arithmetic_matches_a_set_of_seconds() -> None:
    from xmon.goodput.account import _intersect, _subtract

    rng = random.Random(11)

    def intervals() -> tuple[list[tuple[float, float]], set[int]]:
        spans, covered = random_intervals(rng, 40, 300, 20)
        return list(zip(spans.starts, spans.ends, strict=True)), covered

    for _ in range(50):
        (a, sa), (b, sb) = intervals(), intervals()
        assert sum(e - s for s, e in _subtract(a, b)) == len(sa - sb)
        assert sum(e - s for s, e in _intersect(a, b)) == len(sa & sb)
