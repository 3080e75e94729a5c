"""Out of memory, explained: what the job held when XLA could not allocate.

XLA reports an allocation it cannot make as ``RESOURCE_EXHAUSTED`` (``JaxRuntimeError``, an
``XlaRuntimeError`` in older jax). The agent looks at exceptions where they already pass xmon,
so a job that never runs out of memory pays nothing:

* leaving an xmon step (``with xmon.step()``, ``@xmon.step``, a ``StepTraceAnnotation``), which
  sees the exception even when the user catches it further out;
* ``sys.excepthook`` and ``threading.excepthook``, chained in front of whatever hooks were
  there (the user's run afterwards, unchanged), for one that nobody catches;
* the compile hook, for a compile that runs out of memory.

The report is built right there, on the failing thread, while the arrays the failed step held
are still referenced by the exception's frames: the largest live arrays, the allocator's
profile (``jax.profiler.device_memory_profile``) and the program that was running, with the
memory analysis XLA gave it at compile time. It is queued for the daemon; the agent's stop
path (at exit) flushes the queue. One report per exception, and at most one every
``MIN_INTERVAL_SECONDS`` (a job that retries with smaller batches is not profiled each time).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from xmon.agent import memory
from xmon.agent.live_memory import live_arrays
from xmon.model import Program
from xmon.wire.proto import xmon_pb2

log = logging.getLogger("xmon.agent")

MARK = "RESOURCE_EXHAUSTED"
ERROR_TYPES = ("JaxRuntimeError", "XlaRuntimeError")
MAX_ARRAYS = 16
MAX_PROFILE_BYTES = 4 << 20
MAX_ERROR_CHARS = 2048
MAX_SHARDING_CHARS = 256
MIN_INTERVAL_SECONDS = 30.0
_SEEN = "_xmon_oom_seen"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# "allocating 17592186044416 bytes" (CPU), "trying to allocate 17179869184 bytes" (GPU),
# "Attempting to allocate 16.00G" (TPU)
_ALLOCATION = re.compile(r"allocat\w*\s+([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|bytes)?", re.I)


def oom_error(exc: BaseException | None) -> BaseException | None:
    """``exc``, or the exception it was raised from, when it is XLA's out of memory."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 8:
        seen.add(id(exc))
        if type(exc).__name__ in ERROR_TYPES and MARK in str(exc)[:4096]:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def failed_allocation(message: str) -> int | None:
    """The size the error says could not be allocated, in bytes."""
    found = _ALLOCATION.search(message)
    if found is None:
        return None
    raw = (found[2] or "").upper()
    unit = "" if raw in ("", "BYTES") else raw[0]
    return int(float(found[1]) * _UNITS[unit])


def pick_program(
    programs: Sequence[Program], message: str, allocation: int | None
) -> tuple[Program | None, str]:
    """The program the error is about, and how it was told apart."""
    newest = sorted(programs, key=lambda p: p.compiled_at or 0.0, reverse=True)
    for program in newest:
        if program.name and re.search(rf"\b{re.escape(program.name)}\b", message):
            return program, "named in the error"
    if allocation is not None:
        for program in newest:
            sizes = (program.output_bytes, program.temp_bytes, program.argument_bytes)
            if allocation in sizes:
                return program, "allocation size matches its memory analysis"
    if newest:
        return newest[0], "last program compiled"
    return None, ""


def largest_arrays(
    arrays: Sequence[Any], keep: int = MAX_ARRAYS
) -> tuple[list[xmon_pb2.LiveArray], int]:
    """The ``keep`` largest arrays, and the bytes of every distinct buffer behind ``arrays``.

    ``jax.live_arrays()`` lists a sharded array and also each shard's single-device view once
    something asked for it: an array whose buffers a larger one already holds is skipped."""
    sized = []
    for array in arrays:
        try:
            if not array.is_deleted():
                sized.append((int(array.nbytes), array))
        except Exception:  # noqa: BLE001 - an array being deleted under us
            continue
    sized.sort(key=lambda pair: pair[0], reverse=True)
    seen: set[tuple[int, int]] = set()
    rows: list[xmon_pb2.LiveArray] = []
    total = 0
    for nbytes, array in sized:
        parts = _parts(array)
        if parts == []:
            continue  # its computation failed (the allocation that ran out, say): holds nothing
        new = [(key, device, size) for key, device, size in parts or () if key not in seen]
        if parts and not new:
            continue  # a view of buffers counted already
        seen.update(key for key, _, _ in new)
        total += sum(size for _, _, size in new) if parts else nbytes
        if len(rows) < keep:
            rows.append(_live_array(array, nbytes, parts or []))
    return rows, total


def _parts(array: Any) -> list[tuple[tuple[int, int], int, int]] | None:
    """((buffer key, device), device id, bytes) of each of the array's buffers that holds
    memory; [] when none does (its computation failed); None when they cannot be read (donated
    or freed while we looked). The key is the buffer's address where the buffer exists, and the
    piece itself while its computation is still running: asking a buffer not yet made for its
    address aborts the process (XLA's ``Check failed: buffer_.IsConcrete()``)."""
    try:
        if len(array.sharding.device_set) == 1:
            pieces = [array]
        else:
            pieces = getattr(array, "_arrays", None) or [s.data for s in array.addressable_shards]
        out = []
        for piece in pieces:
            state = _buffer_state(piece)
            if state == "failed":
                continue
            device = int(next(iter(piece.sharding.device_set)).id)
            address = id(piece) if state == "pending" else int(piece.unsafe_buffer_pointer())
            out.append(((address, device), device, int(piece.nbytes)))
        return out
    except Exception:  # noqa: BLE001 - donated or freed while we looked: no per-device bytes
        return None


def _buffer_state(piece: Any) -> str:
    """The piece's buffer: "pending" while its computation runs, "failed" when it raised, else
    "ready"."""
    if piece.is_deleted():
        return "failed"
    if not piece.is_ready():
        return "pending"
    try:
        piece.block_until_ready()  # ready: returns at once, or raises the computation's error
    except Exception:  # noqa: BLE001 - the error is the job's; here it only says "no buffer"
        return "failed"
    return "ready"


def _live_array(
    array: Any, nbytes: int, parts: list[tuple[tuple[int, int], int, int]]
) -> xmon_pb2.LiveArray:
    proto = xmon_pb2.LiveArray(
        shape=[int(d) for d in array.shape],
        dtype=str(array.dtype),
        sharding=str(array.sharding)[:MAX_SHARDING_CHARS],
        nbytes=nbytes,
    )
    for _, device, size in parts:
        proto.device_bytes[device] = proto.device_bytes[device] + size
    return proto


def memory_profile() -> tuple[bytes, str]:
    try:
        import jax.profiler

        profile = jax.profiler.device_memory_profile()
    except Exception as exc:  # noqa: BLE001
        return b"", f"device_memory_profile failed: {type(exc).__name__}"
    if len(profile) > MAX_PROFILE_BYTES:
        return b"", f"profile of {len(profile)} bytes is over the {MAX_PROFILE_BYTES} limit"
    return profile, ""


class OomWatch:
    """Turns an out-of-memory exception into an OomReport for the daemon (see the module)."""

    def __init__(
        self,
        programs: Callable[[], list[Program]],
        describe: Callable[[Program], xmon_pb2.ProgramInfo],
        send: Callable[[xmon_pb2.OomReport], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._programs = programs
        self._describe = describe
        self._send = send
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._hooks: tuple[Any, Any] | None = None
        self.reports_total = 0

    def seen(self, exc: BaseException | None, where: str) -> None:
        """Cheap unless ``exc`` is an out-of-memory error; never raises."""
        if exc is None:
            return
        try:
            error = oom_error(exc)
            if error is None or getattr(error, _SEEN, False):
                return
            try:
                setattr(error, _SEEN, True)  # the same exception leaves a step, then the hook
            except Exception:  # noqa: BLE001 - an exception type without a __dict__
                pass
            with self._lock:
                now = self._clock()
                if self._last is not None and now - self._last < MIN_INTERVAL_SECONDS:
                    return
                self._last = now
            self._send(self.build(error, where))
            self.reports_total += 1
        except Exception as failure:  # noqa: BLE001 - the job's own exception goes on
            log.debug("xmon: out-of-memory report failed: %r", failure)

    def build(self, error: BaseException, where: str) -> xmon_pb2.OomReport:
        message = f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]
        allocation = failed_allocation(message)
        arrays = live_arrays() if memory.backends_ready() else []
        largest, held = largest_arrays(arrays)
        report = xmon_pb2.OomReport(
            wall_time=time.time(),
            error=message,
            seen_by=where,
            largest_arrays=largest,
            live_arrays_total=len(arrays),
            live_bytes_total=held,
        )
        del arrays
        report.memory_profile, report.memory_profile_note = memory_profile()
        program, source = pick_program(self._programs(), message, allocation)
        if program is not None:
            report.program.CopyFrom(self._describe(program))
            report.program_source = source
        if allocation is not None:
            report.failed_allocation_bytes = allocation
        for device in memory.local_devices() if memory.backends_ready() else []:
            stats = memory.memory_stats(device) or {}
            report.memory.append(xmon_pb2.DeviceMemorySample(device_id=int(device.id), stats=stats))
        return report

    # -- the hooks for exceptions nobody catches ----------------------------------------------
    def install(self) -> None:
        previous, previous_thread = sys.excepthook, threading.excepthook

        def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            self.seen(value, "excepthook")
            previous(kind, value, tb)

        def thread_excepthook(args: Any) -> None:
            self.seen(args.exc_value, "thread_excepthook")
            previous_thread(args)

        sys.excepthook, threading.excepthook = excepthook, thread_excepthook
        self._hooks = (excepthook, thread_excepthook)
        self._previous = (previous, previous_thread)

    def uninstall(self) -> None:
        """Put the previous hooks back, unless someone chained in front of ours since."""
        if self._hooks is None:
            return
        ours, ours_thread = self._hooks
        previous, previous_thread = self._previous
        if sys.excepthook is ours:
            sys.excepthook = previous
        if threading.excepthook is ours_thread:
            threading.excepthook = previous_thread
        self._hooks = None
