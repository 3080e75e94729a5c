"""The agent's out-of-memory report, in this process with real JAX on CPU: a real
RESOURCE_EXHAUSTED (an output of 16 TiB), seen leaving a step, by the chained excepthooks of
an uncaught error (the hooks that were there still run) and not at all for other errors."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import xmon
from xmon.agent.core import Agent
from xmon.agent.oom import oom_error
from xmon.wire.proto import xmon_pb2


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Agent, list[xmon_pb2.OomReport]]]:
    """An attached agent (no daemon) whose out-of-memory reports are kept here."""
    attached = xmon.attach(job_name="oom", period=60, socket_path=tmp_path / "absent.sock")
    sent: list[xmon_pb2.OomReport] = []
    attached.oom._send = lambda report: sent.append(report) or True  # type: ignore[method-assign]
    yield attached, sent
    xmon.detach()


@jax.jit
def expand(v: jax.Array) -> jax.Array:
    return jnp.broadcast_to(v, (1 << 30, v.shape[0])) * 2.0


def _run_out() -> None:
    expand(jnp.ones((4096,), jnp.float32)).block_until_ready()


def test_an_oom_leaving_a_step_is_reported_once_with_what_was_held(agent: Any) -> None:
    watch, sent = agent
    held = jnp.ones((1024, 1024), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        with xmon.step():
            _run_out()
    assert oom_error(raised.value) is raised.value
    (report,) = sent
    assert report.seen_by == "step" and "RESOURCE_EXHAUSTED" in report.error
    assert report.failed_allocation_bytes == 1 << 44
    assert report.program.name == "jit_expand" and report.program.output_bytes == 1 << 44
    biggest = report.largest_arrays[0]
    assert list(biggest.shape) == [1024, 1024] and biggest.nbytes == held.nbytes
    assert dict(biggest.device_bytes) == {0: held.nbytes}
    assert report.memory_profile[:2] == b"\x1f\x8b"  # gzip'd pprof
    # the same exception passing the excepthook afterwards is not reported again
    sys.excepthook(type(raised.value), raised.value, raised.value.__traceback__)
    assert len(sent) == 1
    del held


def test_an_array_whose_computation_failed_is_held_by_the_job_and_left_out(agent: Any) -> None:
    """The job keeps the output of the computation that ran out of memory (async dispatch hands
    it back before the allocation fails): its buffer never exists, asking for its address would
    abort the job, and it holds no memory."""
    watch, sent = agent
    held = jnp.ones((256, 256), jnp.float32)
    failed = expand(jnp.ones((4096,), jnp.float32))  # dispatched; fails when it runs
    with pytest.raises(jax.errors.JaxRuntimeError):
        with xmon.step():
            failed.block_until_ready()
    (report,) = sent
    assert [list(a.shape) for a in report.largest_arrays][0] == [256, 256]
    assert all(list(a.shape) != [1 << 30, 4096] for a in report.largest_arrays)
    assert report.live_bytes_total < 1 << 40  # the failed 16 TiB output is not counted
    del held, failed


def test_uncaught_errors_reach_the_hooks_that_were_there(
    agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    watch, sent = agent
    seen: list[str] = []
    previous = threading.excepthook
    # a hook the job set before xmon chained in front of it: still called
    watch.oom.uninstall()
    threading.excepthook = lambda args: seen.append(type(args.exc_value).__name__)
    watch.oom.install()
    try:
        worker = threading.Thread(target=_run_out)
        worker.start()
        worker.join()
        other = threading.Thread(target=lambda: 1 / 0)
        other.start()
        other.join()
    finally:
        watch.oom.uninstall()
        threading.excepthook = previous
        watch.oom.install()
    assert seen == ["JaxRuntimeError", "ZeroDivisionError"]
    (report,) = sent  # a ZeroDivisionError is not out of memory
    assert report.seen_by == "thread_excepthook"
