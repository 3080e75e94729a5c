"""The agent's execution sampler (xmon.agent.sampler) in a real JAX process: what a sample
holds, and that it never collides with the user's profiling or a capture."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax._src import profiler as jax_profiler

from xmon.agent.sampler import ExecutionSampler, LedgerConfig
from xmon.execution.samples import parse_sample
from xmon.proto import xmon_pb2


def sampler(duration: float = 0.2, begins: tuple[float, ...] = ()) -> tuple[
    ExecutionSampler, list[xmon_pb2.ExecutionSample]
]:  # fmt: skip
    sent: list[xmon_pb2.ExecutionSample] = []
    config = LedgerConfig(interval=duration * 10, duration=duration)
    return ExecutionSampler(config, lambda s: sent.append(s) or True, lambda: True,
                            step_begins=lambda: begins), sent  # fmt: skip


def busy_thread(stop: threading.Event) -> threading.Thread:
    f = jax.jit(lambda a: jnp.tanh(a @ a))
    a = jnp.ones((128, 128))
    # Compiled before the sample starts: on a GPU the compile alone outlasts a 0.2 s sample,
    # which then holds no execution (seen on an H200).
    f(a).block_until_ready()

    def run() -> None:
        while not stop.is_set():
            f(a).block_until_ready()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_sample_is_the_sessions_xspace_with_the_steps_begun_in_it() -> None:
    stop = threading.Event()
    thread = busy_thread(stop)
    now = time.perf_counter()
    ledger, sent = sampler(begins=(now - 10.0, now + 0.05, now + 0.1))
    try:
        assert ledger.sample_once()
    finally:
        stop.set()
        thread.join()
    (sample,) = sent
    assert sample.steps_marked and 0.15 <= sample.duration_seconds < 5
    assert [round(t, 2) for t in sample.step_begin_seconds] == pytest.approx([0.05, 0.1], abs=0.03)
    reading = parse_sample(sample.xspace, sample.started_at, sample.duration_seconds)
    assert reading.executions and sum(reading.device_busy_seconds.values()) > 0
    assert ledger.samples_total == 1 and ledger.skipped_total == 0


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
