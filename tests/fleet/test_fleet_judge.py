"""The fleet's judgements (xmon.fleet.judge) against hand-computed truths, and ``xmon fleet``'s
text for them."""

from __future__ import annotations

import pytest

from xmon.fleet.judge import (
    STRAGGLER_MIN_RATIO,
    ProcessReading,
    group_by_job,
    hang_first,
    judge,
)
from xmon.fleet.render import render_text, trouble

KEY = "10.0.0.2:8476/4"


def reading(
    index: int, host: float | None = 0.004, rate: float = 20.0, **kw: object
) -> ProcessReading:
    return ProcessReading(KEY, index, 4, f"host-{index}:10049", f"w-{index}", "train", 100 + index,
                          steps_per_second=rate, host_seconds=host, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_the_straggler_is_the_process_whose_devices_wait_longest_for_their_host() -> None:
    # step 50 ms; process 2's host adds 30 ms: without it the job would wait 5 ms (process 1)
    verdict = judge(KEY, [reading(0), reading(1, 0.005), reading(2, 0.034), reading(3)])
    assert verdict.straggler is not None
    assert verdict.straggler.process_index == 2
    assert verdict.straggler.excess_seconds == pytest.approx(0.029)
    assert verdict.straggler.excess_ratio == pytest.approx(0.029 / 0.05)
    assert verdict.skew_ratio == pytest.approx(0.030 / 0.05)
    assert verdict.excess_ratio == pytest.approx({0: 0.0, 1: 0.02, 2: 0.6, 3: 0.0})
    assert trouble(verdict)


def test_two_processes_show_the_whole_gap() -> None:
    """Against the median (their midpoint) a 31 ms gap was shown as 15.5 ms."""
    verdict = judge(KEY, [reading(0, 0.004, rate=10.0), reading(1, 0.035, rate=10.0)])
    assert verdict.straggler is not None and verdict.straggler.process_index == 1
    assert verdict.straggler.excess_seconds == pytest.approx(0.031)
    assert verdict.straggler.excess_ratio == pytest.approx(0.31)


def test_a_named_straggler_stays_named_until_well_under_the_threshold() -> None:
    step = 0.1  # 10 steps a second

    def lagging(gap_ratio: float) -> list[ProcessReading]:
        return [reading(0, 0.01, rate=10.0), reading(1, 0.01 + gap_ratio * step, rate=10.0)]

    near = lagging(0.9 * STRAGGLER_MIN_RATIO)  # under the threshold, over its keep share
    assert judge(KEY, near).straggler is None  # not named afresh
    kept = judge(KEY, near, named_before=1).straggler
    assert kept is not None and kept.process_index == 1  # named before: kept
    assert judge(KEY, near, named_before=0).straggler is None  # another process was
    gone = lagging(0.7 * STRAGGLER_MIN_RATIO)
    assert judge(KEY, gone, named_before=1).straggler is None


def test_a_lag_under_the_thresholds_is_ranked_but_not_marked() -> None:
    just_under = 0.004 + STRAGGLER_MIN_RATIO * 0.05 * 0.99
    verdict = judge(KEY, [reading(0), reading(1), reading(2, just_under), reading(3)])
    assert verdict.straggler is None and not trouble(verdict)
    assert max(verdict.excess_ratio, key=verdict.excess_ratio.__getitem__) == 2
    # a large share of a tiny step is not a straggler either (under 5 ms a step)
    tiny = judge(KEY, [reading(0, 0.0001, 1000.0), reading(1, 0.0009, 1000.0)])
    assert tiny.straggler is None


def test_the_job_step_is_its_slowest_process_and_one_process_is_never_judged() -> None:
    verdict = judge(KEY, [reading(0, rate=20.0), reading(1, rate=10.0)])
    assert verdict.step_seconds == pytest.approx(0.1)
    alone = judge(KEY, [reading(0, 0.5)])
    assert alone.straggler is None and alone.skew_ratio is None


def test_a_hang_names_the_process_waiting_in_its_own_code() -> None:
    stalled = [reading(i, stalled_waits_in="jax", steps_begun=101) for i in range(3)]
    stalled.append(reading(3, stalled_waits_in="host", steps_begun=101))
    assert hang_first(stalled) == (3,)
    assert judge(KEY, stalled).stalled == (0, 1, 2, 3)


def test_a_hang_where_all_wait_in_jax_names_the_process_that_began_fewest_steps() -> None:
    stalled = [reading(i, stalled_waits_in="jax", steps_begun=101) for i in (0, 2, 3)]
    stalled.append(reading(1, stalled_waits_in="jax", steps_begun=100))
    assert hang_first(stalled) == (1,)
    same = [reading(i, stalled_waits_in="jax", steps_begun=101) for i in range(4)]
    assert hang_first(same) == ()  # nothing tells them apart: name nobody


def test_one_stalled_process_is_not_a_fleet_hang() -> None:
    assert hang_first([reading(0, stalled_waits_in="host"), reading(1)]) == ()


def test_missing_processes_are_the_indexes_nobody_reports() -> None:
    verdict = judge(KEY, [reading(0), reading(2)])
    assert verdict.missing == (1, 3)
    assert "MISSING" in render_text([verdict])


def test_processes_group_by_job_key() -> None:
    other = ProcessReading("other/2", 0, 2, "h:1", "w", "eval", 7)
    groups = group_by_job([reading(0), other, reading(1)])
    assert sorted(groups) == sorted([KEY, "other/2"]) and len(groups[KEY]) == 2


def test_the_text_marks_the_straggler_and_where_the_hang_began() -> None:
    slow = judge(KEY, [reading(0), reading(1), reading(2, 0.034), reading(3)])
    text = render_text([slow])
    assert "straggler: process 2" in text and "STRAGGLER +30.0ms/step" in text
    hung = [reading(i, stalled_waits_in="jax") for i in range(3)]
    hung.append(reading(3, stalled_waits_in="host"))
    text = render_text([judge(KEY, hung)])
    assert "hung: stopped first at process 3" in text
    assert "STALLED in host <- stopped first" in text
    assert render_text([]) == "no multi-process job reports to this Prometheus"


def test_a_watch_keeps_its_straggler_named_near_the_threshold() -> None:
    """``xmon fleet --watch`` hands each judgement the last one's straggler: a lag that
    hovers just under the threshold after it was named stays named, with no flicker."""
    import argparse

    from xmon.cli.fleet import verdicts

    class Source:
        def __init__(self, lag_ratio: float) -> None:
            self.lag = lag_ratio

        def readings(self, selector: str) -> list[ProcessReading]:
            step = 1 / 20.0
            return [reading(0, 0.004), reading(1, 0.004 + self.lag * step)]

    args = argparse.Namespace(selector="", all=False, job=None)
    over, near = Source(1.2 * STRAGGLER_MIN_RATIO), Source(0.9 * STRAGGLER_MIN_RATIO)
    first = verdicts(over, args)  # type: ignore[arg-type]
    assert first[0].straggler is not None and first[0].straggler.process_index == 1
    kept = verdicts(near, args, first)  # type: ignore[arg-type]
    assert kept[0].straggler is not None and kept[0].straggler.process_index == 1
    assert verdicts(near, args)[0].straggler is None  # judged afresh: under the threshold


def test_a_job_s_goodput_is_its_least_productive_process_s() -> None:
    verdict = judge(KEY, [reading(0, goodput_ratio=0.8), reading(1, goodput_ratio=0.55),
                          reading(2), reading(3, goodput_ratio=0.9)])  # fmt: skip
    assert verdict.goodput_ratio == pytest.approx(0.55)
    text = render_text([verdict])
    assert "goodput 55% (its least productive process's, 5 min)" in text
    assert "GOOD 5M" in text and " 80% " in text
    assert judge(KEY, [reading(0), reading(1)]).goodput_ratio is None


def test_label_matchers_join_a_series_own() -> None:
    from xmon.fleet.prometheus_source import _selecting

    assert _selecting('xmon_job_goodput_ratio{window="5m"}', 'job="xmon"') == (
        'xmon_job_goodput_ratio{window="5m", job="xmon"}')  # fmt: skip
    assert _selecting("xmon_job_steps_total", 'job="xmon"') == 'xmon_job_steps_total{job="xmon"}'
    assert _selecting("xmon_job_steps_total", "") == "xmon_job_steps_total"
