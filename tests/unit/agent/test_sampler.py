"""The agent's execution sampler (xmon.agent.sampler) in a real JAX process: what a sample
holds, and that it never collides with the user's profiling or a capture."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax._src import profiler as jax_profiler

from xmon.agent import sampler as sampler_module
from xmon.agent.commands import CommandRunner
from xmon.agent.sampler import (
    MAX_SAMPLE_SECONDS,
    MIN_SAMPLE_SECONDS,
    SIZE_MARGIN,
    ExecutionSampler,
    LedgerConfig,
    holds_whole_steps,
    lead_in,
    next_delay,
    recent_intervals,
    sample_limit,
)
from xmon.agent.steps import StepTimer
from xmon.execution.samples import parse_sample
from xmon.wire.proto import xmon_pb2

from support.procs import wait_for


def sampler(
    duration: float = 0.2, begins: Callable[[], Sequence[float]] = tuple
) -> tuple[ExecutionSampler, list[xmon_pb2.ExecutionSample]]:
    sent: list[xmon_pb2.ExecutionSample] = []
    config = LedgerConfig(interval=duration * 10, duration=duration)
    return ExecutionSampler(config, lambda s: sent.append(s) or True, lambda: True,
                            step_begins=begins), sent  # fmt: skip


def stepping_thread(stop: threading.Event, timer: StepTimer | None = None,
                    step_seconds: float = 0.0) -> threading.Thread:  # fmt: skip
    """A thread running a compiled program in a loop, each run a marked step of at least
    ``step_seconds`` where ``timer`` is given."""
    f = jax.jit(lambda a: jnp.tanh(a @ a))
    a = jnp.ones((128, 128))
    # Compiled before the sample starts: on a GPU the compile alone outlasts a 0.2 s sample,
    # which then holds no execution (seen on an H200).
    f(a).block_until_ready()

    def run() -> None:
        while not stop.is_set():
            if timer is None:
                f(a).block_until_ready()
                continue
            with timer.step():
                began = time.perf_counter()
                f(a).block_until_ready()
                time.sleep(max(0.0, step_seconds - (time.perf_counter() - began)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def marked_sample(
    step_seconds: float,
    asked: float | None = None,
    asked_before_steps: bool = False,
    most: float = 0.0,
) -> tuple[ExecutionSampler, xmon_pb2.ExecutionSample]:
    """One sample of a thread marking steps of at least ``step_seconds`` (the daemon having
    asked for ``asked`` seconds, where given, once it stepped or before, and for at most
    ``most``), and the sampler that took it."""
    timer = StepTimer()
    ledger, sent = sampler(begins=lambda: timer.begin_times)
    if asked is not None and asked_before_steps:
        ledger.ask_length(asked)
    stop = threading.Event()
    thread = stepping_thread(stop, timer, step_seconds)
    try:
        wait_for(lambda: len(timer.begin_times) >= 3, 30, "three steps")
        if (asked is not None and not asked_before_steps) or most:
            ledger.ask_length(asked or 0.0, most)
        assert ledger.sample_once()
    finally:
        stop.set()
        thread.join()
    (sample,) = sent
    return ledger, sample


@pytest.mark.parametrize("step_seconds", [0.005, 0.3, 1.2])
def test_a_sample_holds_whole_marked_steps_counted_by_the_daemon(step_seconds: float) -> None:
    ledger, sample = marked_sample(step_seconds)
    begins = list(sample.step_begin_seconds)
    assert sample.steps_marked and len(begins) >= 2 and sample.HasField("anchor_seconds")
    assert 0 <= sample.anchor_seconds < begins[0]
    # At least the configured 0.2 s, and never two whole steps more than needed: long steps
    # open the session just before a begin.
    assert 0.2 <= sample.duration_seconds < max(0.2, step_seconds) + 2 * step_seconds + 0.5
    reading = parse_sample(sample.xspace, sample.started_at, sample.duration_seconds, begins,
                           True, sample.anchor_seconds)  # fmt: skip
    steps = len(begins) - 1
    assert reading.whole_periods
    if step_seconds < 0.1:
        # Many steps: whole periods of the program, its rate over the markers' rate.
        assert reading.steps_in_core == pytest.approx(steps, rel=0.1)
        ratio = reading.executions[reading.dominant] / reading.steps_in_core
        assert ratio == pytest.approx(1.0, rel=0.15), reading
    else:
        # One step or two, whole, one execution each. The profiler records from inside the
        # session's start, before the agent's clock says it runs: a step begun then is in the
        # recording but its begin is not among the sample's (on a busy host: two steps, one
        # of them without its begin).
        assert steps <= reading.steps_in_core <= steps + 1, (steps, reading)
        assert reading.executions == {reading.dominant: reading.steps_in_core}, reading
    assert ledger.samples_total == 1 and ledger.skipped_total == 0


def test_an_unmarked_sample_is_the_sessions_xspace_of_its_duration() -> None:
    stop = threading.Event()
    thread = stepping_thread(stop)
    ledger, sent = sampler()
    try:
        assert ledger.sample_once()
    finally:
        stop.set()
        thread.join()
    (sample,) = sent
    assert not sample.steps_marked and 0.15 <= sample.duration_seconds < 5
    reading = parse_sample(sample.xspace, sample.started_at, sample.duration_seconds)
    assert reading.executions and sum(reading.device_busy_seconds.values()) > 0


def test_a_marked_job_not_stepping_is_waited_for_not_skipped() -> None:
    ledger, sent = sampler(begins=lambda: (time.perf_counter() - 100.0,))
    assert not ledger.sample_once() and not sent
    assert (ledger.samples_total, ledger.skipped_total) == (0, 0)


def test_whole_steps_end_a_sample_and_long_steps_are_waited_for_just_before_a_begin() -> None:
    assert not holds_whole_steps(1, 5.0, 0.2) and not holds_whole_steps(5, 0.1, 0.2)
    assert holds_whole_steps(2, 0.2, 0.2)
    assert recent_intervals([1.0, 3.0, 6.0]) == [2.0, 3.0]
    assert sample_limit(0.2, [2.0, 10.0]) == 0.2 + 2.5 * 10.0
    assert sample_limit(0.2, [100.0]) == MAX_SAMPLE_SECONDS
    # steps of 10 s, the last begun at 100 s: at 103 s the session opens at 110 - 1 - 0.1
    assert lead_in([10.0] * 4, [70.0, 80.0, 90.0, 100.0], 103.0, 0.1) == pytest.approx(5.9)
    # too late for the next begin: the one after it
    assert lead_in([10.0] * 4, [100.0], 109.5, 0.1) == pytest.approx(9.4)
    assert lead_in([0.3] * 4, [100.0], 100.1, 0.1) == 0.0  # short steps: at once
    assert lead_in([1.0, 5.0, 1.0], [100.0], 100.1, 0.1) == 0.0  # irregular: at once
    config = LedgerConfig(interval=20.0, duration=0.2)
    assert next_delay(config, 0.2) == 20.0 and next_delay(config, 2.2) == pytest.approx(220.0)


def test_a_running_trace_or_a_held_profiler_lock_skips_the_sample(tmp_path: Path) -> None:
    ledger, sent = sampler()
    jax.profiler.start_trace(str(tmp_path))
    try:
        assert not ledger.sample_once()  # the user's (or a capture's) trace is running
    finally:
        jax.profiler.stop_trace()
    with jax_profiler._profile_state.lock:  # a start_trace or stop_trace in progress
        assert not ledger.sample_once()
    assert (ledger.samples_total, ledger.skipped_total, ledger.busy_total, sent) == (0, 2, 2, [])
    assert ledger.sample_once()  # and once both are over, samples go on


def test_a_trace_started_during_a_sample_waits_for_it_instead_of_failing(tmp_path: Path) -> None:
    ledger, sent = sampler(duration=0.5)
    sampling = threading.Thread(target=ledger.sample_once)
    sampling.start()
    time.sleep(0.1)  # the sample holds the profiler now
    started = time.perf_counter()
    jax.profiler.start_trace(str(tmp_path))  # raises if it collided with the sample
    waited = time.perf_counter() - started
    jax.profiler.stop_trace()
    sampling.join()
    assert len(sent) == 1 and 0.2 < waited < 5.0


def test_no_session_starts_once_the_job_is_ending() -> None:
    ledger, sent = sampler()
    ledger.stop()
    assert not ledger.sample_once() and not sent


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"XMON_LEDGER_INTERVAL": "abc"}, "XMON_LEDGER_INTERVAL must be a number of seconds"),
        ({"XMON_LEDGER_DURATION": "-1"}, "XMON_LEDGER_DURATION must be a number of seconds"),
        ({"XMON_LEDGER_DURATION": "20"}, "ledger duration must be 0.01-10 s"),
        ({"XMON_LEDGER_INTERVAL": "0.1"}, "ledger interval must exceed its duration"),
    ],
)
def test_bad_settings_are_one_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LedgerConfig.from_env(env)


def test_the_ledger_can_be_turned_off() -> None:
    assert not LedgerConfig.from_env({"XMON_LEDGER": "off"}).enabled
    assert LedgerConfig.from_env({}) == LedgerConfig()


def test_the_daemons_ask_for_longer_samples() -> None:
    ledger, _ = sampler()
    ledger.ask_length(7.0)
    assert ledger.asked_seconds == 7.0
    for wrong in (float("nan"), float("inf"), -1.0):
        ledger.ask_length(wrong)
        assert ledger.asked_seconds == 7.0
    ledger.ask_length(0.0)  # as configured again (a job that began to mark steps)
    assert ledger.asked_seconds == 0.2
    ledger.ask_length(7.0)
    ledger.ask_length(0.01)  # never shorter than configured
    assert ledger.asked_seconds == 0.2
    ledger.ask_length(1e9)  # never longer than the longest sample
    assert ledger.asked_seconds == MAX_SAMPLE_SECONDS
    # The agent's command runner hands the ask over and sends no result for it.
    replies: list[xmon_pb2.CommandResult] = []
    runner = CommandRunner(replies.append)
    runner.sample_length_listener = ledger.ask_length
    runner.submit(xmon_pb2.DaemonCommand(sample_length=xmon_pb2.SampleLength(seconds=3.5)))
    assert ledger.asked_seconds == 3.5 and replies == []


def test_the_daemons_limit_on_sample_length_wins_over_its_ask() -> None:
    """Samples refused for their size (more events than the daemon reads): it asks for at
    most so long, below the configured duration where need be, but never below 10 ms."""
    ledger, _ = sampler()
    ledger.ask_length(0.0, 0.05)
    assert ledger.most_seconds == 0.05 and ledger._length(marked=False) == 0.05
    ledger.ask_length(7.0, 0.5)  # longer asked (a job without markers), shorter wins
    assert ledger._length(marked=False) == 0.5
    ledger.ask_length(7.0, 1e-6)
    assert ledger.most_seconds == MIN_SAMPLE_SECONDS
    for no_limit in (0.0, float("nan"), float("inf"), -1.0):
        ledger.ask_length(7.0, no_limit)
        assert ledger.most_seconds is None and ledger._length(marked=False) == 7.0
    runner = CommandRunner(lambda result: None)
    runner.sample_length_listener = ledger.ask_length
    length = xmon_pb2.SampleLength(seconds=0.0, max_seconds=0.08)
    runner.submit(xmon_pb2.DaemonCommand(sample_length=length))
    assert ledger.most_seconds == 0.08 and ledger._length(marked=False) == 0.08


def test_a_marked_sample_under_a_limit_still_holds_whole_steps() -> None:
    ledger, sample = marked_sample(0.005, most=0.03)
    assert sample.steps_marked and len(sample.step_begin_seconds) >= 2
    recording = sample.duration_seconds - ledger._start_cost  # its length counts the start
    assert recording < 0.15  # not the configured 0.2 s


def test_a_sample_too_large_to_send_makes_the_next_ones_shorter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sample over the size the daemon reads is dropped here, and the agent shortens its
    samples in proportion, with a margin; one that is still too large (a job's event rate
    varies, more so on a loaded host) shortens them again, until one fits."""
    stop = threading.Event()
    thread = stepping_thread(stop)
    ledger, sent = sampler(duration=0.5)
    try:
        assert ledger.sample_once()
        size = len(sent[0].xspace)
        monkeypatch.setattr(sampler_module, "MAX_SAMPLE_BYTES", size // 4)
        assert not ledger.sample_once()
        assert ledger.too_large_total == 1 and ledger.skipped_total == 1
        limits = [ledger.most_seconds]
        # in proportion: a sample over the size by any factor records less than the margin of it
        assert limits[0] is not None and limits[0] < ledger.last_recorded * SIZE_MARGIN
        for _ in range(5):
            if ledger.sample_once():
                break
            limits.append(ledger.most_seconds)
        else:
            raise AssertionError(f"no sample fitted; limits {limits}")
        # each sample still too large shortens them again, never back up
        assert all(b <= a * SIZE_MARGIN for a, b in zip(limits, limits[1:], strict=False))
        assert sent[-1].duration_seconds <= limits[-1] + 0.1 and len(sent[-1].xspace) <= size // 4
    finally:
        stop.set()
        thread.join()


def test_a_marked_sample_records_as_long_as_the_daemon_asked() -> None:
    # The daemon asks for longer samples of a job with a program too rare for two of its runs
    # in a 0.2 s sample (xmon.execution.ledger.rarer_sample_seconds)
    _, sample = marked_sample(0.005, asked=0.6)
    assert sample.steps_marked and 0.6 <= sample.duration_seconds < 5


def test_an_ask_made_before_the_job_marked_steps_does_not_hold_for_its_marked_samples() -> None:
    # Samples of a job's initialisation, before its first step, are asked to grow (up to
    # minutes); its first marked sample recorded that long until the daemon took the ask back
    _, sample = marked_sample(0.005, asked=3.0, asked_before_steps=True)
    assert sample.steps_marked and 0.2 <= sample.duration_seconds < 1.5


def test_the_next_sample_s_time_is_known_while_the_sampler_waits() -> None:
    """Views say when the ledger's numbers will come (xmon_agent_ledger_next_sample_...)."""
    config = LedgerConfig(interval=60.0, duration=0.2, first_delay=30.0)
    idle = ExecutionSampler(config, lambda s: True, lambda: True)
    assert idle.next_sample_at is None
    idle.start()
    try:
        wait_for(lambda: idle.next_sample_at, 5, "the sampler's first wait")
        assert idle.next_sample_at == pytest.approx(time.time() + 30.0, abs=2.0)
    finally:
        idle.stop()
    assert idle.next_sample_at is None
