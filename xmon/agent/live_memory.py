"""Bytes in use per device where PJRT has no allocator stats (the CPU backend).

Each device buffer is counted once. ``jax.live_arrays()`` lists arrays, not buffers: a sharded
array's shards (``shard.data``, cached on the array) are live single-device arrays over the
same buffers, and two arrays may alias one buffer. Buffers are told apart by their address
(``unsafe_buffer_pointer()``) per device; one donated after the snapshot was taken (its
address gone) is told apart by its object, a sharded one by its sharding; where both kinds were
donated, a view cannot be told from its parent's shard and the reading is dropped.

A reading is taken only at rest: never while a marked step is open, and never while a thread
may be inside a jitted call (``in_flight``): a donated step has deleted its inputs there
while its outputs do not exist yet. Between readings the last one stands. With step markers
the snapshot (one ``jax.live_arrays()`` call) is taken on the job's thread as its last open
step ends, when the agent waits for one; the agent thread then counts it in slices of at most
``SLICE_SECONDS`` that give the GIL back in between, and paces readings so that counting
costs at most ``BUDGET`` of the wall time.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from xmon.agent.in_flight import dispatch_marks, xmon_threads
from xmon.agent.steps import StepTimer

SLICE_SECONDS = 0.0005  # longest stretch of counting between two GIL hand-overs
PAUSE_SECONDS = 0.0002  # long enough for a waiting thread to wake and take the GIL
BUDGET = 0.001  # share of wall time the readings may take, snapshot included
TRIES = 5  # attempts per report to find the job at rest without markers
MAX_INTERVAL = 300.0  # the longest pacing between readings (beyond it, over budget)

Snapshot = Callable[[], list[Any]]


def live_arrays() -> list[Any]:
    import jax

    return list(jax.live_arrays())


def _device_id(part: Any) -> int:
    device = getattr(part.sharding, "_device", None)  # SingleDeviceSharding, without a set
    if device is None:
        device = next(iter(part.sharding.device_set))
    return int(device.id)


_DEVICE_SHIFT = 52  # addresses fit in 48 bits: a buffer's key is one int (no GC-tracked tuple)
_DONATED = 1 << 62  # keys of buffers told apart by object, not address


class BufferCount:
    """Per-device bytes of distinct buffers, fed array by array."""

    def __init__(self, device_ids: Sequence[int]) -> None:
        self.totals = {int(d): 0 for d in device_ids}
        self._seen: set[int] = set()
        self.deleted_parents = 0  # sharded arrays donated since the snapshot
        self.deleted_parts = 0  # single-device ones: maybe views of such a parent

    def add(self, array: Any) -> None:
        try:
            if len(array.sharding.device_set) == 1:
                self._add_part(array)
                return
            parts = array._arrays  # cached: the very objects that shard.data returns
            if parts is None:  # donated since the snapshot: its shards are gone
                self._add_deleted(array)
                return
        except AttributeError:
            parts = [shard.data for shard in array.addressable_shards]
        except Exception:  # noqa: BLE001 - freed while we looked
            return
        for part in parts:
            try:
                self._add_part(part)
            except Exception:  # noqa: BLE001
                continue

    def _add_part(self, part: Any) -> None:
        device_id = _device_id(part)
        if device_id not in self.totals:
            return
        try:
            key = int(part.unsafe_buffer_pointer()) ^ (device_id << _DEVICE_SHIFT)
        except Exception:  # noqa: BLE001 - donated since the snapshot: live when it was taken
            key = id(part) ^ (device_id << _DEVICE_SHIFT) ^ _DONATED
            self.deleted_parts += 1
        if key not in self._seen:
            self._seen.add(key)
            self.totals[device_id] += int(part.nbytes)

    def _add_deleted(self, array: Any) -> None:
        """An array donated after the snapshot: its shard bytes from its sharding."""
        try:
            sharding = array.sharding
            shard_bytes = math.prod(sharding.shard_shape(array.shape)) * array.dtype.itemsize
            devices = [int(d.id) for d in sharding.addressable_devices]
        except Exception:  # noqa: BLE001
            return
        self.deleted_parents += 1
        for device_id in devices:
            key = id(array) ^ (device_id << _DEVICE_SHIFT) ^ _DONATED
            if device_id in self.totals and key not in self._seen:
                self._seen.add(key)
                self.totals[device_id] += int(shard_bytes)


def count_buffers(
    arrays: Sequence[Any],
    device_ids: Sequence[int],
    clock: Callable[[], float] = time.perf_counter,
    pause: Callable[[], None] = lambda: time.sleep(PAUSE_SECONDS),
    slice_seconds: float = SLICE_SECONDS,
) -> dict[int, int] | None:
    """Bytes per device of the distinct buffers behind ``arrays``, counted in time slices that
    hand the GIL to the job in between (a pure-Python loop would otherwise keep it for the
    interpreter's whole switch interval, 5 ms, whenever the job waits for it)."""
    count = BufferCount(device_ids)
    slice_started = clock()
    for array in arrays:
        if clock() - slice_started > slice_seconds:
            pause()
            slice_started = clock()
        count.add(array)
    if count.deleted_parents and count.deleted_parts:
        return None  # a donated parent's shard views cannot be told from its shards: no reading
    return count.totals


class LiveMemory:
    """Readings of live buffer bytes per device, taken only at rest, paced by cost."""

    def __init__(
        self,
        timer: StepTimer,
        snapshot: Snapshot = live_arrays,
        clock: Callable[[], float] = time.perf_counter,
        budget: float = BUDGET,
    ) -> None:
        self._timer = timer
        self._snapshot = snapshot
        self._clock = clock
        self._budget = budget
        self._lock = threading.Lock()
        self._waiting = False
        self._taken: list[Any] | None = None
        self._taken_cost = 0.0
        self._arrived = threading.Event()
        self._next_at = 0.0
        self.last: dict[int, int] | None = None
        self.last_cost = 0.0  # this thread's CPU seconds in the latest read()
        self.last_at: float | None = None  # clock time of the last reading's snapshot
        self.last_wall: float | None = None  # the same moment by the wall clock
        self.readings = 0
        timer.boundary_listener = self._at_boundary

    # -- job's thread ------------------------------------------------------------------------
    def _at_boundary(self) -> None:
        """The last open step just ended: snapshot here if the agent waits for one."""
        if not self._waiting:
            return
        with self._lock:
            if not self._waiting or self._taken is not None:
                return
            if dispatch_marks([threading.get_ident(), *xmon_threads()]) is None:
                return  # another thread is mid-dispatch: the next boundary will do
            started = self._clock()
            self._taken = self._snapshot()
            self._taken_cost = self._clock() - started
        self._arrived.set()

    # -- agent thread ------------------------------------------------------------------------
    def read(self, device_ids: Sequence[int], wait: float) -> dict[int, int] | None:
        """A fresh reading when one is due and the job comes to rest, else the last one."""
        now = self._clock()
        self.last_cost = 0.0
        if now < self._next_at:
            return self.last
        started = time.thread_time()
        arrays, snapshot_cost = self._at_rest(wait)
        if arrays is not None:
            counting = time.thread_time()
            totals = count_buffers(arrays, device_ids, self._clock)
            del arrays  # hold no array past the count: the job may be freeing them
            if totals is not None:
                self.last, self.last_at = totals, now
                self.last_wall = time.time() - (self._clock() - now)
                self.readings += 1
            cost = time.thread_time() - counting + snapshot_cost
            # Pace by the steady cost of a reading (the first one pays one-time costs).
            pause = min(cost / self._budget, MAX_INTERVAL) if self.readings > 1 else 0.0
            self._next_at = now + pause
        self.last_cost = time.thread_time() - started
        return self.last

    def _at_rest(self, wait: float) -> tuple[list[Any] | None, float]:
        if self._timer.open_steps():  # mid-step: only the step's end will do
            return self._wait_for_boundary(wait) or (None, 0.0)
        return self._snapshot_here(), 0.0

    def _wait_for_boundary(self, wait: float) -> tuple[list[Any], float] | None:
        self._arrived.clear()
        self._waiting = True
        self._arrived.wait(wait)
        with self._lock:
            self._waiting = False
            taken, self._taken = self._taken, None
        return None if taken is None else (taken, self._taken_cost)

    def _snapshot_here(self) -> list[Any] | None:
        """Snapshot from the agent thread when no step is open and no thread is dispatching,
        the same before and after (no thread ran Python in between)."""
        own = [threading.get_ident(), *xmon_threads()]
        for attempt in range(TRIES):
            if attempt:
                time.sleep(0.002 * attempt)
            boundaries = self._timer.boundaries
            before = dispatch_marks(own)
            if before is None or self._timer.open_steps():
                continue
            arrays = self._snapshot()
            if dispatch_marks(own) == before and self._timer.boundaries == boundaries:
                return arrays
            del arrays
        return None
