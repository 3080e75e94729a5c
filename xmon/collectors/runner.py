"""Runs the enabled collectors each tick, isolating failures and hangs per collector.

Each collector gets one long-lived worker thread; the tick waits for all of them up to one
shared deadline, so a hung collector costs at most ``timeout`` and never blocks the others.
Health follows node_exporter's scrape_collector_* idea and lands in ``CollectorHealth``.

A tick nobody reads (``CollectContext.live`` false: no view, no scrape due, no TensorBoard
write) wakes no worker: each collector's last output stands, as long as the set of jobs it was
collected for has not changed. Rates a collector derives from two reads (CPU) then span the time
between the reads someone sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from xmon.collectors.base import (
    REGISTRY,
    CollectContext,
    Collector,
    CollectorOutput,
    CollectorRegistry,
)
from xmon.config import DaemonConfig
from xmon.model import CollectorHealth, ProcessSample

log = logging.getLogger("xmon.collectors")


@dataclass
class _Call:
    """One collect() handed to a collector's worker thread; filled in by that thread."""

    context: CollectContext
    started: float
    notify: Callable[[], None] | None = None  # also called (on the worker) when done
    done: threading.Event = field(default_factory=threading.Event)
    output: CollectorOutput | None = None
    error: BaseException | None = None
    finished: float | None = None


class _Slot:
    """A collector with its own long-lived worker thread and its health so far.

    One thread per collector, not one per call: a hung call then pins exactly one thread, and
    per-thread state a library keeps (psutil keys cpu_percent's last sample by thread) lasts.
    """

    def __init__(self, name: str, factory: Callable[[], Collector], clock: Callable[[], float]):
        self.name = name
        self._factory = factory
        self._collector: Collector | None = None  # built on the worker: a slow init can't block
        self._clock = clock
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.pending: _Call | None = None
        self.reused: _Call | None = None  # the last good call, when this tick re-serves it
        self.up: bool | None = None  # None until the first result
        self.present = True
        self.errors_total = 0
        self.last_error: str | None = None

    def submit(
        self, context: CollectContext, now: float, notify: Callable[[], None] | None = None
    ) -> bool:
        """Start a call unless the previous one is still running, or can stand for this tick."""
        self.reused = None
        last = self.pending
        if last is not None and not last.done.is_set():
            return False
        if (
            not context.live
            and last is not None
            and last.error is None
            and last.context.pids == context.pids
        ):
            self.reused = last
            return False
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name=f"xmon-collector-{self.name}", daemon=True
            )
            self._thread.start()
        self.pending = _Call(context, now, notify)
        self._queue.put(self.pending)
        return True

    def stop(self) -> threading.Thread | None:
        self._queue.put(None)
        return self._thread

    def _serve(self) -> None:
        while (call := self._queue.get()) is not None:
            self._execute(call)
        close = getattr(self._collector, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:
                log.warning("collector %s: close failed: %s", self.name, exc)

    def _execute(self, call: _Call) -> None:
        try:
            if self._collector is None:
                self._collector = self._factory()
            output = self._collector.collect(call.context)
            if not isinstance(output, CollectorOutput):
                raise TypeError(f"collect() returned {type(output).__name__}, not CollectorOutput")
            call.output = output
        except BaseException as exc:  # the worker must outlive anything a collector raises
            call.error = exc
        finally:
            call.finished = self._clock()
            call.done.set()
            if call.notify is not None:
                call.notify()

    def record(
        self, output: CollectorOutput | None, error: str | None, exc: BaseException | None = None
    ) -> None:
        """Update health from one tick's result, logging only when up/down/present changes."""
        if output is None:
            self.errors_total += 1
            self.last_error = error
            if self.up is not False:
                log.warning("collector %s down: %s", self.name, error, exc_info=exc)
            self.up = False
            return
        if self.up is False:
            log.info("collector %s up again", self.name)
        if output.present != self.present:
            state = "present" if output.present else "not present on this host"
            log.info("collector %s: hardware %s", self.name, state)
        self.up, self.present = True, output.present

    def health(self, duration: float | None) -> CollectorHealth:
        return CollectorHealth(
            name=self.name,
            up=bool(self.up),
            errors_total=self.errors_total,
            duration_seconds=duration,
            last_error=self.last_error,
            present=self.present,
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def merge_outputs(outputs: Iterable[CollectorOutput]) -> CollectorOutput:
    """One output from many: the first host sample, all devices, processes first-wins."""
    outputs = [o for o in outputs if o.present]
    processes: dict[int, ProcessSample] = {}
    for output in reversed(outputs):
        processes.update(output.processes)
    return CollectorOutput(
        host=next((o.host for o in outputs if o.host is not None), None),
        devices=tuple(device for o in outputs for device in o.devices),
        processes=processes,
        runtime_services=tuple(service for o in outputs for service in o.runtime_services),
    )


class CollectorRunner:
    """Runs collectors each tick, each on its own worker thread, bounded by ``timeout``.

    ``collectors`` are registered names or ready instances. A collector that does not answer
    within ``timeout`` seconds of the tick's start is marked down and is not called again until
    that call returns. Every tick that yields no fresh output counts one error. ``config`` goes
    to the collectors registered with ``takes_config`` (the defaults when it is None).
    """

    def __init__(
        self,
        collectors: Iterable[str | Collector],
        *,
        timeout: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry = REGISTRY,
        config: DaemonConfig | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.timeout = timeout
        self._clock = clock
        self._closed = False
        self._slots: list[_Slot] = []
        for item in collectors:
            name, factory = _resolve(item, registry, config)
            if name in self.names:
                raise ValueError(f"collector {name!r} given twice")
            self._slots.append(_Slot(name, factory, clock))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self._slots)

    def run(self, context: CollectContext) -> tuple[CollectorOutput, tuple[CollectorHealth, ...]]:
        """One tick: call every collector, wait at most ``timeout``, merge what came back."""
        if self._closed:
            raise RuntimeError("CollectorRunner.run() after close()")
        start = self._clock()
        deadline = start + self.timeout
        submitted = [slot.submit(context, start) for slot in self._slots]
        return self._gather(submitted, deadline)

    async def run_async(
        self, context: CollectContext
    ) -> tuple[CollectorOutput, tuple[CollectorHealth, ...]]:
        """``run`` for an asyncio loop, without a thread of its own to wait in: each worker
        wakes the loop when its call is done (an idle daemon's cost is mostly wakeups)."""
        if self._closed:
            raise RuntimeError("CollectorRunner.run_async() after close()")
        loop = asyncio.get_running_loop()
        start = self._clock()
        deadline = start + self.timeout
        waiters: list[asyncio.Future[None]] = []
        submitted = []
        for slot in self._slots:
            waiter: asyncio.Future[None] = loop.create_future()
            fresh = slot.submit(context, start, _waker(loop, waiter))
            submitted.append(fresh)
            if fresh:
                waiters.append(waiter)
        if waiters:
            await asyncio.wait(waiters, timeout=max(0.0, deadline - self._clock()))
        return self._gather(submitted, deadline)

    def _gather(
        self, submitted: list[bool], deadline: float
    ) -> tuple[CollectorOutput, tuple[CollectorHealth, ...]]:
        """Every slot's result of this tick (waiting until ``deadline`` at most), merged."""
        outputs, health = [], []
        for slot, fresh in zip(self._slots, submitted, strict=True):
            output, duration = self._settle(slot, fresh, deadline)
            outputs.extend([output] if output is not None else [])
            health.append(slot.health(duration))
        return merge_outputs(outputs), tuple(health)

    def _settle(
        self, slot: _Slot, fresh: bool, deadline: float
    ) -> tuple[CollectorOutput | None, float | None]:
        if slot.reused is not None:
            assert slot.reused.finished is not None
            return slot.reused.output, slot.reused.finished - slot.reused.started
        call = slot.pending
        assert call is not None  # submit() ran for every slot
        if fresh:
            call.done.wait(max(0.0, deadline - self._clock()))
        if fresh and call.done.is_set():
            assert call.finished is not None
            if call.error is not None:
                slot.record(None, _describe(call.error), call.error)
            else:
                slot.record(call.output, None)
            return call.output, call.finished - call.started
        error = f"timed out after {self.timeout:g}s"
        age = self._clock() - call.started
        slot.record(None, error if fresh else f"{error}; still running after {age:.1f}s")
        return None, age

    def close(self, wait: float | None = None) -> None:
        """Stop the workers; each calls its collector's ``close()`` once its call is done.

        Waits up to ``wait`` seconds (default ``timeout``); a hung worker is left behind (it is
        a daemon thread) rather than blocking shutdown.
        """
        self._closed = True
        threads = [slot.stop() for slot in self._slots]
        deadline = time.monotonic() + (self.timeout if wait is None else wait)
        for thread in threads:
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))


def _waker(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None]) -> Callable[[], None]:
    def resolve() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed while the call ran
            loop.call_soon_threadsafe(resolve)

    return wake


def _resolve(
    item: str | Collector, registry: CollectorRegistry, config: DaemonConfig | None
) -> tuple[str, Callable[[], Collector]]:
    if isinstance(item, str):
        entry = registry.get(item)
        if entry.takes_config:
            settings = config if config is not None else DaemonConfig()
            return entry.name, lambda: entry.factory(settings)
        return entry.name, entry.factory
    return item.name, lambda: item
