"""The CPU fallback for device memory: each buffer once, read at rest, in GIL-sized slices."""

from __future__ import annotations

import dis
import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xmon.agent.in_flight import call_site, calls_jax, dispatch_marks, jitted_call
from xmon.agent.live_memory import LiveMemory, count_buffers, live_arrays
from xmon.agent.steps import StepTimer

DEVICES = [0, 1, 2, 3]


@pytest.fixture
def mesh() -> Mesh:
    assert len(jax.local_devices()) == 4, "conftest asks XLA for 4 CPU devices"
    return Mesh(np.array(jax.local_devices()), ("data",))


def _sharded(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...]) -> jax.Array:
    return jax.device_put(np.ones(shape, np.float32), NamedSharding(mesh, spec))


def _ours(arrays: list[jax.Array]) -> list[Any]:
    """Only this test's arrays (and their shard views), whatever else the session holds."""
    own = {id(a) for a in arrays} | {id(s.data) for a in arrays for s in a.addressable_shards}
    return [a for a in live_arrays() if id(a) in own]


def test_sharded_and_replicated_arrays_and_their_shards_count_once(mesh: Mesh) -> None:
    batch = _sharded(mesh, PartitionSpec("data"), (1024, 256))  # 256 KiB per device
    params = _sharded(mesh, PartitionSpec(), (256, 256))  # 256 KiB on every device
    views = [s.data for s in batch.addressable_shards]  # live arrays over batch's buffers
    totals = count_buffers(_ours([batch, params]), DEVICES)
    assert totals == {d: 512 * 1024 for d in DEVICES}
    assert len(views) == 4


def test_an_array_donated_after_the_snapshot_still_counts_as_live_then(mesh: Mesh) -> None:
    state = _sharded(mesh, PartitionSpec(), (128, 128))  # 64 KiB per device
    single = jax.device_put(np.ones(1024, np.float32), jax.local_devices()[1])  # 4 KiB
    sharded_snapshot = [a for a in live_arrays() if a is state]
    single_snapshot = [a for a in live_arrays() if a is single]
    step = jax.jit(lambda x: x + 1, donate_argnums=0)
    new, new_single = step(state), step(single)
    assert state.is_deleted() and single.is_deleted()
    assert count_buffers(sharded_snapshot, DEVICES) == {d: 65536 for d in DEVICES}
    assert count_buffers(single_snapshot, DEVICES) == {0: 0, 1: 4096, 2: 0, 3: 0}
    assert count_buffers(_ours([new, new_single]), DEVICES) == {0: 65536, 1: 69632, 2: 65536,
                                                                3: 65536}  # fmt: skip


def test_a_donated_parent_beside_donated_views_gives_no_reading(mesh: Mesh) -> None:
    state = _sharded(mesh, PartitionSpec(), (128, 128))
    views = [s.data for s in state.addressable_shards]
    snapshot = _ours([state])
    jax.jit(lambda x: x + 1, donate_argnums=0)(state)
    assert count_buffers(snapshot, DEVICES) is None and len(views) == 4


def test_counting_gives_the_gil_back_between_slices() -> None:
    arrays = [jnp.ones(4) for _ in range(10)]
    now = [0.0]
    pauses: list[float] = []

    def clock() -> float:
        now[0] += 0.0002  # each look at the clock: 0.2 ms later
        return now[0]

    count_buffers(arrays, DEVICES, clock=clock, pause=lambda: pauses.append(now[0]))
    assert len(pauses) >= 3  # a 0.5 ms slice holds about two arrays here


class PjitFunction(functools.partial):  # type: ignore[type-arg]
    """Stands for jaxlib's jitted callable: C-level, so its caller's frame stays on the call."""


PjitFunction.__module__ = "jaxlib.stand_in"


@pytest.fixture
def in_jitted_call() -> Iterator[threading.Thread]:
    """A thread parked inside a call to a jitted function (which sleeps in C)."""
    step = PjitFunction(time.sleep, 0.5)

    def loop() -> None:
        step()

    thread = threading.Thread(target=loop)
    thread.start()
    time.sleep(0.1)
    yield thread
    thread.join(10)


def test_a_thread_inside_a_jitted_call_is_seen(in_jitted_call: threading.Thread) -> None:
    assert dispatch_marks([threading.get_ident()]) is None


def test_the_jitted_call_a_thread_is_inside_is_named_from_any_of_its_frames() -> None:
    """Inside a host callback, the jitted call is in a frame below the top one."""
    callback = PjitFunction(lambda: time.sleep(0.5))  # runs Python: a frame above the call
    thread = _parked(lambda: callback())
    try:
        assert jitted_call(thread.ident) == "a jitted function"
        assert jitted_call(threading.get_ident()) == ""
    finally:
        thread.join()


def test_a_thread_sleeping_is_not_a_dispatch() -> None:
    done = threading.Event()
    thread = threading.Thread(target=lambda: time.sleep(0.5) or done.set())
    thread.start()
    time.sleep(0.05)
    frame = dict(__import__("sys")._current_frames())[thread.ident]  # type: ignore[index]
    assert not calls_jax(frame)
    assert dispatch_marks([threading.get_ident()]) is not None
    thread.join()


class JitWrapper:
    """Stands for a library's jit wrapper (Flax NNX's ``nnx.jit``): an object holding its
    jitted function, whose ``__call__`` runs Python after the jitted call returns. Like
    nnx.jit's, it binds as a method (``__get__``), which makes ``inspect`` call it a routine."""

    def __init__(self, after: float) -> None:
        self.jitted_fn = PjitFunction(time.sleep, 0.0)
        self.after = after

    def __call__(self, *args: object) -> None:
        self.jitted_fn()
        time.sleep(self.after)  # writes the new state back into the module: old state alive

    def __get__(self, obj: object, kind: type | None = None) -> Callable[..., None]:
        return self if obj is None else functools.partial(self, obj)


class Trainer:
    """Holds a jitted step too, but is not called: its method runs the loop."""

    def __init__(self) -> None:
        self.step = PjitFunction(time.sleep, 0.0)

    def fit(self, seconds: float) -> None:
        time.sleep(seconds)


def _parked(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target)
    thread.start()
    time.sleep(0.1)
    return thread


def test_a_thread_inside_a_jit_wrapper_after_its_jitted_call_is_in_flight() -> None:
    wrapper = JitWrapper(after=0.5)
    thread = _parked(lambda: wrapper())
    try:
        frame = dict(sys._current_frames())[thread.ident]  # type: ignore[index]
        assert not calls_jax(frame)  # the top frame sleeps: only its caller tells
        assert dispatch_marks([threading.get_ident()]) is None
    finally:
        thread.join()


def test_a_jit_wrapper_called_with_arguments_is_in_flight_after_its_jitted_call() -> None:
    """As user code calls one: ``train_step(model, optimizer, batch)``. The callee is the
    first thing the call site loads, not the last (the batch)."""
    wrapper = JitWrapper(after=0.5)
    model, optimizer, batch = object(), object(), np.ones(3)
    thread = _parked(lambda: wrapper(model, optimizer, batch))
    try:
        assert dispatch_marks([threading.get_ident()]) is None
    finally:
        thread.join()


def _callees(function: Callable[..., object]) -> list[tuple[tuple[str, str], ...]]:
    """The callee each call in ``function`` names, in the order of its calls (3.11's PRECALL
    before each is not where a thread stops)."""
    calls = [i for i in dis.get_instructions(function) if i.opname != "PRECALL"]
    sites = [call_site(function.__code__, ins.offset) for ins in calls]
    return [site.callee for site in sites if site is not None]


def test_a_call_site_names_its_callee_not_its_arguments() -> None:
    def calls(step: Any, state: Any, batch: Any, self: Any, args: Any, fns: Any, make: Any) -> None:
        step(state, batch)
        self.jitted_fn(*args, k=batch)
        print(step(batch))
        fns[0](batch)
        make()(batch)
        self.layer(batch).apply(
            state,
            batch,
        )

    name, attr = "name", "attr"
    assert _callees(calls) == [
        ((name, "step"),),
        ((name, "self"), (attr, "jitted_fn")),
        ((name, "step"),),  # the inner call first
        ((name, "print"),),
        (),  # a subscript's result: not a name
        ((name, "make"),),
        (),  # what make() returned
        ((name, "self"), (attr, "layer")),
        (),  # an attribute of a call's result
    ]


def test_objects_holding_a_jitted_function_count_only_while_called() -> None:
    trainer = Trainer()
    thread = _parked(lambda: trainer.fit(0.5))  # a method of the object: at rest here
    try:
        assert dispatch_marks([threading.get_ident()]) is not None
    finally:
        thread.join()


def test_no_snapshot_is_taken_while_a_step_is_open() -> None:
    timer = StepTimer()
    taken: list[int] = []
    memory = LiveMemory(timer, snapshot=lambda: taken.append(1) or [])
    timer.begin()
    assert memory.read(DEVICES, wait=0.05) is None and taken == []
    timer.end()
    assert memory.read(DEVICES, wait=0.05) == {d: 0 for d in DEVICES} and taken == [1]


def test_with_a_step_open_the_snapshot_is_taken_as_it_ends() -> None:
    timer = StepTimer()
    where: list[str] = []
    memory = LiveMemory(timer, snapshot=lambda: where.append(threading.current_thread().name) or [])
    timer.begin()

    def end_soon() -> None:
        time.sleep(0.1)
        timer.end()

    job = threading.Thread(target=end_soon, name="job")
    job.start()
    assert memory.read(DEVICES, wait=5) == {d: 0 for d in DEVICES}
    job.join()
    assert where == ["job"]


def test_readings_are_paced_by_their_cost() -> None:
    now = [0.0]
    memory = LiveMemory(StepTimer(), snapshot=list, clock=lambda: now[0], budget=1e-9)
    memory.read(DEVICES, wait=0)
    memory.read(DEVICES, wait=0)  # the second reading sets the pace: far beyond now
    now[0] += 1.0
    readings = memory.readings
    memory.read(DEVICES, wait=0)
    assert memory.readings == readings and memory.last == {d: 0 for d in DEVICES}
