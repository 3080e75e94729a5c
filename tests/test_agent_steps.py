"""StepTimer: sums that add up to the job's clock, open steps across threads, boundaries."""

from __future__ import annotations

import threading
from pathlib import Path

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


def test_xprof_sees_the_steps_of_a_job_marked_only_with_xmon_step(tmp_path: Path) -> None:
    """While a trace records, the outermost xmon.step() is also jax's StepTraceAnnotation:
    XProf's overview finds the steps (without it: "No step marker observed", 0.0 ms steps)."""
    import re
    import time

    import jax
    import jax.numpy as jnp
    from xprof.convert import raw_to_tool_data

    import xmon

    agent = xmon.attach(job_name="xprof-steps", socket_path=tmp_path / "none.sock", ledger=False)
    try:
        f = jax.jit(lambda a: jnp.tanh(a @ a))
        a = f(jnp.ones((128, 128))).block_until_ready()
        jax.profiler.start_trace(str(tmp_path / "trace"))
        for _ in range(20):
            with xmon.step():
                with xmon.step():  # nested: one step, one annotation
                    a = f(a).block_until_ready()
                time.sleep(0.01)
        jax.profiler.stop_trace()
    finally:
        xmon.detach()
    assert agent.steps.steps_total == 20  # the nested steps and their annotations count once
    (xplane,) = (tmp_path / "trace").rglob("*.xplane.pb")
    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "overview_page", {})
    text = data if isinstance(data, str) else data.decode(errors="ignore")
    assert "No step marker observed" not in text
    average = re.findall(r"\"steptime_ms_average\":\"?([0-9.]+)", text)
    assert average and 10.0 <= float(average[0]) < 100.0, average


def test_a_boundary_listener_that_raises_never_reaches_the_step() -> None:
    timer = StepTimer()

    def broken() -> None:
        raise RuntimeError("a reading failed")

    timer.boundary_listener = broken
    with timer.step():
        pass
    assert timer.steps_total == 1
