"""Which process of which job: the identity an agent reports (xmon.agent.identity), the step
and stall facts it adds (xmon.agent.steps, xmon.agent.stall), and how the daemon splits a step
(xmon.execution.rates.step_breakdown, xmon.execution.samples.is_collective)."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest

from xmon.agent.identity import identify
from xmon.agent.stall import waits_in
from xmon.agent.steps import StepTimer
from xmon.execution.ledger import ledger_rates
from xmon.execution.rates import busy_by_device, step_breakdown
from xmon.execution.samples import SampleReading, is_collective


def test_every_process_of_a_distributed_job_gets_the_coordinator_key() -> None:
    devices = [SimpleNamespace(slice_index=1)]
    ids = [identify(f"name{i}", devices, {}, None, ("10.0.0.2:8476", 4), i, 4) for i in range(4)]
    assert {i.job_key for i in ids} == {"10.0.0.2:8476/4"}  # job names may differ
    assert [i.process_index for i in ids] == [0, 1, 2, 3]
    assert all(i.distributed and not i.job_key_declared and i.slice_index == 1 for i in ids)


def test_a_declared_key_wins_and_a_lone_process_gets_its_own() -> None:
    declared = identify("train", [], {"XMON_JOB_KEY": "run-42"}, None, ("c:1", 2), 0, 2)
    assert declared.job_key == "run-42" and declared.job_key_declared
    assert identify("t", [], {}, "run-7").job_key == "run-7"
    lone = identify("train", [], {})
    assert lone.job_key.startswith(f"{socket.gethostname()}/train/") and not lone.distributed
    assert lone.process_count == 1


def test_the_worker_comes_from_the_platform_else_the_hostname() -> None:
    assert identify("t", [], {"TPU_WORKER_ID": "3"}).worker == "3"
    assert identify("t", [], {"JOB_COMPLETION_INDEX": "5"}).worker == "5"
    assert identify("t", [], {}).worker == socket.gethostname()
    hostile = identify("t", [], {"XMON_JOB_KEY": "a\x1b[2Jb" + "x" * 500})
    assert "\x1b" not in hostile.job_key and len(hostile.job_key) == 128


def test_devices_on_two_slices_have_no_one_slice_index() -> None:
    devices = [SimpleNamespace(slice_index=0), SimpleNamespace(slice_index=1)]
    assert identify("t", devices, {}).slice_index is None


def test_steps_begun_count_the_open_step_and_say_how_long_it_has_run() -> None:
    now = [100.0]
    timer = StepTimer(clock=lambda: now[0])
    assert timer.open_step_seconds() is None
    timer.begin()
    now[0] = 100.5
    assert timer.steps_begun == 1 and timer.open_step_seconds() == pytest.approx(0.5)
    timer.end()
    assert timer.open_step_seconds() is None and timer.steps_begun == 1
    timer.begin()
    timer.begin()  # nested: one step
    assert timer.steps_begun == 2
    assert timer.step_thread == threading.get_ident()


def test_a_thread_waiting_in_its_own_code_waits_in_host() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        time.sleep(0.05)
        assert waits_in(thread.ident) == "host"
    finally:
        release.set()
        thread.join()
    assert waits_in(None) == "" and waits_in(thread.ident) == ""  # gone


def test_a_thread_blocked_on_the_device_waits_in_jax() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    gate = threading.Event()

    def blocking(x: np.ndarray) -> np.ndarray:
        gate.wait(10)
        return x

    @jax.jit
    def slow(x: jax.Array) -> jax.Array:
        return jax.pure_callback(blocking, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1

    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(slow(jnp.ones(3)).block_until_ready()))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while waits_in(thread.ident) != "jax" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert waits_in(thread.ident) == "jax"
    finally:
        gate.set()
        thread.join(10)
    assert result


@pytest.mark.parametrize(
    ("name", "collective"),
    [("all-reduce.2", True), ("%all-gather-start.1", True), ("reduce-scatter", True),
     ("collective-permute-done.3", True), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", True),
     ("all-to-all.1", True), ("send.4", True), ("fusion.12", False), ("dot.2", False),
     ("reduce.3", False), ("sendfile", False), ("copy_subtract_fusion", False)],
)  # fmt: skip
def test_collective_ops_are_told_by_their_hlo_names(name: str, collective: bool) -> None:
    assert is_collective(name) is collective


def test_a_step_splits_into_compute_collective_and_host_time() -> None:
    split = step_breakdown({0: 0.8, 1: 0.6}, {0: 0.5, 1: 0.3}, steps_per_second=10.0)
    assert split is not None
    assert split.step_seconds == pytest.approx(0.1)
    assert split.collective_seconds == pytest.approx(0.04)
    assert split.compute_seconds == pytest.approx(0.03)
    assert split.host_seconds == pytest.approx(0.03)
    total = split.compute_seconds + split.collective_seconds + split.host_seconds
    assert total == pytest.approx(split.step_seconds)
    assert step_breakdown({0: 0.5}, {}, None) is None
    assert step_breakdown({}, {}, 10.0) is None


def test_a_step_on_one_device_is_split_over_that_device_only() -> None:
    """A step running on one of 4 devices, the others idle (or a rare program on one): the
    split follows the device the step uses, not the mean with the idle ones."""
    split = step_breakdown({0: 0.8, 1: 0.0, 2: 0.01, 3: 0.0}, {}, steps_per_second=10.0)
    assert split is not None
    assert split.compute_seconds == pytest.approx(0.08)
    assert split.host_seconds == pytest.approx(0.02)
    idle = step_breakdown({0: 0.0, 1: 0.0}, {}, steps_per_second=10.0)
    assert idle is not None and idle.host_seconds == pytest.approx(0.1)


def test_one_sample_of_a_descheduled_process_does_not_move_the_median_ratios() -> None:
    def sample(busy: float, collective: float) -> SampleReading:
        return SampleReading(0.0, 0.2, 0.2, {}, None, True, None, {0: busy * 0.2}, {}, {},
                             device_collective_seconds={0: collective * 0.2})  # fmt: skip

    samples = [sample(0.8, 0.5), sample(0.82, 0.5), sample(0.1, 0.0), sample(0.79, 0.48)]
    rates = ledger_rates(samples)
    assert rates.busy_ratio[0] == pytest.approx((0.8 + 0.82 + 0.1 + 0.79) / 4)  # the mean moves
    assert rates.busy_ratio_median[0] == pytest.approx(0.795)
    assert rates.collective_ratio_median[0] == pytest.approx(0.49)
    assert ledger_rates([]).busy_ratio_median == {}


def test_cpu_devices_of_a_later_process_are_found_by_their_id() -> None:
    # process 1 of a distributed CPU job: device id 2048, local ordinal 0; the profiler names
    # its ops by the id
    assert busy_by_device({2048: 0.7}, [2048], {2048: 0}) == {2048: 0.7}
    assert busy_by_device({0: 0.7, 1: 0.2}, [8, 9], {8: 0, 9: 1}) == {8: 0.7, 9: 0.2}
    assert busy_by_device({}, [0], {0: 0}) == {0: 0.0}
