"""StepTimer: sums that add up to the job's clock, open steps across threads, boundaries."""

from __future__ import annotations

import threading

import pytest

from xmon.agent.steps import StepTimer


def _timer(now: list[float]) -> StepTimer:
    return StepTimer(clock=lambda: now[0])


@pytest.mark.parametrize(
    "steps,total,recent",
    [
        ([(0.0, 0.5)], 0.5, []),  # one step: its own time, no interval yet
        ([(0.0, 0.5), (1.0, 1.1), (3.0, 3.2)], 3.2, [1.0, 2.0]),
        ([(10.0, 10.2), (10.2, 10.4), (10.4, 10.6)], 0.6, [0.2, 0.2]),
    ],
)
def test_step_seconds_run_from_first_start_to_last_end(
    steps: list[tuple[float, float]], total: float, recent: list[float]
) -> None:
    now = [0.0]
    timer = _timer(now)
    for start, end in steps:
        now[0] = start
        timer.begin()
        now[0] = end
        timer.end()
    assert timer.totals() == (len(steps), pytest.approx(total))
    assert timer.take_recent() == pytest.approx(recent)


def test_an_open_step_is_not_counted_until_it_ends() -> None:
    now = [0.0]
    timer = _timer(now)
    timer.begin()
    now[0] = 1.0
    timer.end()
    now[0] = 2.0
    timer.begin()
    assert timer.totals() == (1, 1.0) and timer.open_steps() == 1
    now[0] = 2.5
    timer.end()
    assert timer.totals() == (2, 2.5) and timer.open_steps() == 0


def test_open_steps_are_counted_over_threads_and_the_boundary_fires_when_all_end() -> None:
    timer = StepTimer()
    fired: list[int] = []
    timer.boundary_listener = lambda: fired.append(timer.open_steps())
    opened, release = threading.Event(), threading.Event()

    def other() -> None:
        with timer.step():
            opened.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    opened.wait(5)
    with timer.step():
        assert timer.open_steps() == 2
    assert fired == []  # the other thread's step is still open
    release.set()
    thread.join(5)
    assert fired == [0] and timer.open_steps() == 0


def test_boundaries_change_at_every_outermost_begin_and_end() -> None:
    timer = StepTimer()
    before = timer.boundaries
    with timer.step():
        with timer.step():  # nested: no boundary
            pass
    assert timer.boundaries == before + 2


def test_a_boundary_listener_that_raises_never_reaches_the_step() -> None:
    timer = StepTimer()

    def broken() -> None:
        raise RuntimeError("a reading failed")

    timer.boundary_listener = broken
    with timer.step():
        pass
    assert timer.steps_total == 1
