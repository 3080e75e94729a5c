"""The agent's side of the account (xmon.agent.goodput) on a step timer and jax.monitoring
events driven by a hand-set clock: stalls found from step periods, checkpoints from Orbax's
event names and from xmon.checkpointing, start-up from the process's start."""

from __future__ import annotations

import pytest

from xmon.agent.goodput import GoodputWatch
from xmon.agent.steps import StepTimer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stepping(timer: StepTimer, clock: Clock, steps: int, seconds: float) -> None:
    for _ in range(steps):
        timer.begin()
        clock.now += seconds
        timer.end()


def watch_of(clock: Clock, started_ago: float = 5.0) -> tuple[GoodputWatch, StepTimer]:
    timer = StepTimer(clock=clock)
    wall = lambda: clock.now + 1e9  # noqa: E731 - the wall clock runs 1e9 s ahead
    watch = GoodputWatch(timer, clock.now + 1e9 - started_ago, False, clock=clock, wall=wall)
    return watch, timer


def seconds(watch: GoodputWatch) -> dict[str, float]:
    account = watch.report()
    return {k: round(v, 6) for k, v in account.seconds.items() if v}


def test_a_job_s_life_from_start_up_to_idle() -> None:
    clock = Clock()
    watch, timer = watch_of(clock)
    watch.on_duration("/jax/core/compile/jaxpr_trace_duration", 0.5)  # 999.5 - 1000
    clock.now += 1.0
    timer.begin()  # the first step: its program compiles inside it
    clock.now += 2.0
    watch.on_duration("/jax/core/compile/backend_compile_duration", 1.5)
    timer.end()
    stepping(timer, clock, 99, 0.1)
    assert seconds(watch) == {"startup": 5.5, "compile": 2.0, "steps": 10.4}
    # a sync Orbax save between steps: its whole call; the async one's background is not badput
    clock.now += 3.0
    watch.on_duration("/jax/orbax/write/total_duration_secs", 3.0)
    watch.on_duration("/jax/orbax/write/async/total_duration_secs", 30.0)
    stepping(timer, clock, 20, 0.1)
    # ten seconds without a step, then steps again: a stall beyond the median period
    clock.now += 10.0
    stepping(timer, clock, 20, 0.1)
    got = seconds(watch)
    assert got == {"startup": 5.5, "compile": 2.0, "checkpoint_save": 3.0, "stall": 10.0,
                   "steps": 14.4}  # fmt: skip
    clock.now += 30.0  # the loop ended: idle once past the stall threshold
    got = seconds(watch)
    assert got["idle"] == pytest.approx(30.0) and got["steps"] == 14.4
    account = watch.report()
    assert account.steps_marked
    assert account.as_of - account.process_started_at == pytest.approx(sum(got.values()))


def test_a_step_open_past_the_threshold_is_a_stall_while_it_lasts() -> None:
    clock = Clock()
    watch, timer = watch_of(clock, started_ago=0.0)
    stepping(timer, clock, 50, 0.1)
    timer.begin()
    clock.now += 30.0  # hung inside a step
    got = seconds(watch)
    assert got == {"steps": 5.0 + 0.1, "stall": 29.9}


def test_a_checkpoint_marked_by_the_job() -> None:
    clock = Clock()
    watch, timer = watch_of(clock, started_ago=0.0)
    stepping(timer, clock, 10, 0.1)
    with watch.span("restore"):
        clock.now += 4.0
    stepping(timer, clock, 10, 0.1)
    assert seconds(watch) == {"steps": 2.0, "checkpoint_restore": 4.0}
    with pytest.raises(ValueError, match="'save' or 'restore'"):
        with watch.span("load"):
            pass


def test_a_late_attach_leaves_the_time_before_it_unattributed() -> None:
    clock = Clock()
    timer = StepTimer(clock=clock)
    wall = lambda: clock.now  # noqa: E731
    watch = GoodputWatch(timer, clock.now - 60.0, True, clock=clock, wall=wall)
    clock.now += 1.0
    assert seconds(watch) == {"unattributed": 60.0, "startup": 1.0}


def test_listeners_never_raise_into_the_job() -> None:
    clock = Clock()
    watch, _ = watch_of(clock)
    watch.on_duration("/jax/orbax/write/total_duration_secs", "not a number")  # type: ignore[arg-type]
    watch.on_duration("/jax/core/compile/backend_compile_duration", float("nan"))
    assert sum(watch.report().seconds.values()) == pytest.approx(5.0)


def test_spans_found_after_their_time_was_sealed_take_it_back() -> None:
    """Each report seals all but the last 30 s: a 60 s stall (found when steps resume) and a
    45 s compile (reported at its end) still count whole."""
    clock = Clock()
    watch, timer = watch_of(clock, started_ago=0.0)
    stepping(timer, clock, 50, 0.1)
    watch.report()
    for _ in range(60):  # no step for a minute, reported every second: idle, then sealed
        clock.now += 1.0
        watch.report()
    stepping(timer, clock, 20, 0.1)
    assert seconds(watch) == {"steps": 7.0, "stall": 60.0}
    for _ in range(45):  # a 45 s compile between steps: idle, then sealed, until reported
        clock.now += 1.0
        watch.report()
    watch.on_duration("/jax/core/compile/backend_compile_duration", 45.0)
    got = seconds(watch)
    assert got == {"steps": 7.0, "stall": 60.0, "compile": 45.0}


def test_more_begins_than_the_timer_keeps_between_two_reports() -> None:
    """Past MAX_PENDING_STEPS begins between reports the oldest are gone: the periods across
    the gap are not folded (no stall made of it), the rest are, and nothing is lost."""
    from xmon.agent.steps import MAX_PENDING_STEPS

    clock = Clock()
    watch, timer = watch_of(clock, started_ago=0.0)
    stepping(timer, clock, 10, 0.001)
    watch.report()
    stepping(timer, clock, MAX_PENDING_STEPS + 500, 0.001)
    begun, fresh, whole = timer.begins_since(10)
    assert (begun, len(fresh), whole) == (MAX_PENDING_STEPS + 510, MAX_PENDING_STEPS, False)
    got = seconds(watch)
    assert got == {"steps": pytest.approx(0.001 * (MAX_PENDING_STEPS + 510))}


def test_a_report_walks_every_begin_only_when_a_period_passed_the_threshold() -> None:
    """Thousands of steps a second: a report reads the latest RECENT_PERIODS + 1 begins (the
    median's), unless the timer saw a period past the stall threshold since the last one."""
    from xmon.agent.goodput import RECENT_PERIODS

    clock = Clock()
    watch, timer = watch_of(clock, started_ago=0.0)
    stepping(timer, clock, 100, 0.01)
    watch.report()
    reads: list[int | None] = []
    original = timer.begins_since

    def begins_since(seen: int, latest: int | None = None) -> tuple[int, list[float], bool]:
        reads.append(latest)
        return original(seen, latest)

    timer.begins_since = begins_since  # type: ignore[method-assign]
    stepping(timer, clock, 2000, 0.01)
    assert "stall" not in seconds(watch) and reads == [RECENT_PERIODS + 1]
    # a 5 s stall among 2,000 steps: every begin is walked, the stall found where it was
    stepping(timer, clock, 1000, 0.01)
    clock.now += 5.0
    stepping(timer, clock, 1000, 0.01)
    got = seconds(watch)
    assert reads[-1] is None and got["stall"] == pytest.approx(5.0)
    assert got["steps"] == pytest.approx(0.01 * 4100)
    stepping(timer, clock, 500, 0.01)  # and the next report reads the latest again
    assert seconds(watch)["steps"] == pytest.approx(0.01 * 4600)
    assert reads[-1] == RECENT_PERIODS + 1


def test_the_api_checks_what_it_is_given_with_or_without_an_agent() -> None:
    import xmon

    with pytest.raises(ValueError, match="'save' or 'restore', got 'load'"):
        xmon.checkpointing("load")
    with xmon.checkpointing("restore"):  # no agent attached: a no-op
        pass
