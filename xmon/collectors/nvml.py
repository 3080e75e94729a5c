"""The ``nvml`` collector: NVIDIA GPUs through NVML (nvidia-ml-py, imported as ``pynvml``).

Each tick makes one pass per GPU (:func:`xmon.collectors.nvml_device.read_gpu`): memory
used/total/reserved, utilisation, GPM SM activity where the GPU has it, power and energy,
temperature, clocks, PCIe and NVLink throughput, ECC counters, XID events and the compute
processes with their memory. Static facts (name, UUID, PCI bus id, which optional counters
exist) are read once when NVML starts.

Without the ``gpu`` extra, a driver or a GPU the collector reports itself not present (not an
error) and tries NVML again every ``retry_seconds``. pynvml itself (~2.5 MiB once imported) is
imported only once the driver's NVML library loads, so a host without NVIDIA GPUs, a TPU VM
say, never carries it. The NVML module is injectable, so the mapping is tested with a stand-in
that keeps pynvml's names, structs and error classes.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any

from xmon.collectors.base import CollectContext, CollectorOutput, register
from xmon.collectors.nvml_device import GpuState, open_gpu, read_gpu

log = logging.getLogger("xmon.collectors.nvml")

RETRY_SECONDS = 60.0
MAX_EVENTS_PER_TICK = 256  # XID storms must not hold up the tick


NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml loads on Linux


def load_pynvml() -> Any | None:
    """The pynvml module, or None without the ``gpu`` extra (pip install 'xmon[gpu]')."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


def nvml_library_loads(name: str = NVML_LIBRARY) -> bool:
    """Whether the driver's NVML library can be loaded, as pynvml's nvmlInit would load it."""
    if sys.platform != "linux":
        return True  # pynvml's own search (Windows paths) decides there
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def load_nvml() -> Any | None:
    """pynvml once the driver's NVML library loads; None without a driver or nvidia-ml-py."""
    if not nvml_library_loads():
        log.debug("nvml: not available: %s cannot be loaded", NVML_LIBRARY)
        return None
    nv = load_pynvml()
    if nv is None:
        log.debug("nvml: not available: nvidia-ml-py is not installed")
    return nv


class XidEvents:
    """XID error events of all GPUs through one NVML event set, drained without blocking."""

    def __init__(self, nv: Any, event_set: Any) -> None:
        self._nv, self._set = nv, event_set

    @classmethod
    def register(cls, nv: Any, states: list[GpuState]) -> XidEvents | None:
        """Register every GPU that supports XID events; their counters start at 0."""
        try:
            event_set = nv.nvmlEventSetCreate()
        except Exception as exc:  # NVMLError_NotSupported in some VMs and containers
            log.debug("nvml: no event set, XID errors not counted: %s", exc)
            return None
        for state in states:
            try:
                nv.nvmlDeviceRegisterEvents(
                    state.handle, nv.nvmlEventTypeXidCriticalError, event_set
                )
            except Exception as exc:
                log.debug("nvml: GPU %d: XID events not supported: %s", state.index, exc)
                continue
            state.xid_errors_total = 0
        return cls(nv, event_set)

    def drain(self, states: list[GpuState]) -> None:
        """Count the XID events waiting now (1 ms wait at most, one event per call)."""
        by_index = {state.index: state for state in states}
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                event = self._nv.nvmlEventSetWait_v2(self._set, 1)
            except Exception:  # NVMLError_Timeout: nothing more is waiting
                return
            if event.eventType != self._nv.nvmlEventTypeXidCriticalError:
                continue
            index = _event_index(self._nv, event)
            state = None if index is None else by_index.get(index)
            if state is not None and state.xid_errors_total is not None:
                state.xid_errors_total += 1
                state.last_xid = int(event.eventData)

    def close(self) -> None:
        try:
            self._nv.nvmlEventSetFree(self._set)
        except Exception:  # shutting down anyway
            pass


def _event_index(nv: Any, event: Any) -> int | None:
    try:
        return int(nv.nvmlDeviceGetIndex(event.device))
    except Exception:
        return None


@register(
    "nvml",
    help="NVIDIA GPUs through NVML: memory, utilisation, SM activity, power, clocks, "
    "PCIe/NVLink, ECC and XID errors, compute processes (needs xmon[gpu])",
)
class NvmlCollector:
    """Not thread-safe by itself; the runner never calls ``collect`` concurrently."""

    name = "nvml"

    def __init__(
        self,
        nv: Any = None,
        retry_seconds: float = RETRY_SECONDS,
        load: Callable[[], Any | None] = load_nvml,
    ) -> None:
        self._nv = nv  # None: ``load()`` at the next try
        self._load = load
        self._retry_seconds = retry_seconds
        self._states: list[GpuState] | None = None  # None: NVML not started
        self._events: XidEvents | None = None
        self._next_try: float | None = None  # monotonic time of the next nvmlInit attempt

    def collect(self, context: CollectContext) -> CollectorOutput:
        if self._states is None and not self._start(context.monotonic):
            return CollectorOutput(present=False)
        assert self._states is not None
        if self._events is not None:
            self._events.drain(self._states)
        devices = []
        for state in self._states:
            before = state.errors
            devices.append(read_gpu(self._nv, state))
            _log_error_change(state, before)
        return CollectorOutput(devices=tuple(devices))

    def _start(self, now: float) -> bool:
        """Start NVML and open every GPU; False (retry later) where there is none."""
        if self._next_try is not None and now < self._next_try:
            return False
        self._next_try = now + self._retry_seconds
        if self._nv is None:
            self._nv = self._load()
            if self._nv is None:
                return False
        try:
            self._nv.nvmlInit()
        except self._nv.NVMLError as exc:  # no library, no driver, no permission
            log.debug("nvml: not available: %s", exc)
            return False
        states = _open_all(self._nv)
        if not states:
            self._shutdown()
            return False
        self._states, self._events = states, XidEvents.register(self._nv, states)
        log.info("nvml: %d GPU(s): %s", len(states), ", ".join(s.name for s in states))
        return True

    def close(self) -> None:
        if self._states is None:
            return
        for state in self._states:
            if state.gpm is not None:
                state.gpm.close()
        if self._events is not None:
            self._events.close()
        self._states = self._events = None
        self._shutdown()

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()  # type: ignore[union-attr]  # only called once started
        except Exception as exc:
            log.debug("nvml: shutdown failed: %s", exc)


def _open_all(nv: Any) -> list[GpuState]:
    """Every GPU NVML can open; one it cannot (lost, or hidden from this container) is left out."""
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        log.warning("nvml: cannot count GPUs: %s", exc)
        return []
    states = []
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            log.warning("nvml: GPU %d left out: %s", index, exc)
            continue
        state = open_gpu(nv, index, handle)
        if state.errors:
            log.warning("nvml: GPU %d: %s", index, "; ".join(state.errors))
        states.append(state)
    return states


def _log_error_change(state: GpuState, before: tuple[str, ...]) -> None:
    """One line when a GPU starts failing calls, or fails differently, and one when it recovers."""
    if state.errors == before:
        return
    if state.errors:
        log.warning("nvml: GPU %d: %s", state.index, "; ".join(state.errors))
    else:
        log.info("nvml: GPU %d: reads recovered", state.index)
