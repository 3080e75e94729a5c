"""A stand-in for the pynvml module, for the hardware this machine lacks.

It answers with pynvml's own ctypes structs, constants and NVMLError classes (taken from the
installed nvidia-ml-py), so the collector's code paths are the ones it takes on a GPU: real
``c_nvmlFieldValue_t`` arrays, ``c_nvmlMemory_v2_t``, ``c_nvmlGpmMetricsGet_t`` requests that
the collector fills in, device handles that are real ``nvmlDevice_t`` pointers. A function it
does not implement raises ``NVMLError_FunctionNotFound``, as a driver without it would.
"""

from __future__ import annotations

import ctypes
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 2**20


@dataclass
class FakeGpu:
    """One GPU, in NVML's units; counters move with :meth:`FakeNvml.advance`."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:18:00.0"
    total: int = 81559 * MIB
    reserved: int = 539 * MIB
    used: int = 0
    util_gpu: int = 0  # percent
    util_memory: int = 0
    power_mw: int = 69_000
    power_limit_mw: int = 700_000
    energy_mj: int = 5_000_000
    temperature_c: int = 31
    sm_mhz: int = 345
    mem_mhz: int = 2619
    pcie_tx_rate: float = 0.0  # bytes/s, for the field counters
    pcie_rx_rate: float = 0.0
    pcie_counters: bool = True  # has the PCIe byte counter fields (else the 20 ms sampler)
    pcie_throughput_kb: tuple[int, int] = (0, 0)  # nvmlDeviceGetPcieThroughput TX, RX (KB/s)
    nvlink_kib_rate: tuple[float, ...] = ()  # per link, KiB/s each way
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)  # (error type, counter)
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    gpm: dict[int, float] | None = None  # metric id -> percent; None: no GPM on this GPU
    xid_events: bool = True  # supports XID event registration
    failing: dict[str, type[Exception]] = field(default_factory=dict)  # function -> error
    # counters (advanced by the fake's clock)
    pcie_tx_bytes: float = 1e12
    pcie_rx_bytes: float = 2e12
    nvlink_kib: list[float] = field(default_factory=list)


def h100(index: int, **overrides: Any) -> FakeGpu:
    """An SXM H100 as NVML reports it, with 18 NVLink links."""
    values: dict[str, Any] = dict(
        uuid=f"GPU-4a0b6c2e-91d3-4f7b-8e55-{index:012x}",
        bus_id=f"00000000:{0x18 + 0x11 * index:02X}:00.0",
        nvlink_kib_rate=(0.0,) * 18,
        gpm={},
    )
    values.update(overrides)
    return FakeGpu(**values)


class FakeNvml:
    """pynvml's names for a host with ``gpus``; ``init_error`` makes nvmlInit fail."""

    def __init__(self, gpus: list[FakeGpu], init_error: type[Exception] | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.clock_us = 1_700_000_000_000_000  # field value timestamps, µs since 1970
        self.calls: list[str] = []
        self.initialised = False
        self.handles = [ctypes.pointer(pynvml.struct_c_nvmlDevice_t()) for _ in gpus]
        self.samples: dict[int, tuple[int, int] | None] = {}  # GPM sample -> (clock, gpu)
        self.event_sets: list[Any] = []
        self.registered: set[int] = set()
        self.pending_events: list[tuple[int, int]] = []  # (gpu index, xid)
        for gpu in gpus:
            gpu.nvlink_kib = [1e6 * (i + 1) for i in range(len(gpu.nvlink_kib_rate))]

    def __getattr__(self, name: str) -> Any:
        real = getattr(pynvml, name)
        if name.startswith("nvml") and inspect.isfunction(real):
            return self._missing
        return real  # constants, structs, error classes

    def _missing(self, *args: Any, **kwargs: Any) -> Any:
        raise pynvml.NVMLError_FunctionNotFound()

    # --- test controls ------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.clock_us += int(seconds * 1e6)
        for gpu in self.gpus:
            gpu.pcie_tx_bytes += gpu.pcie_tx_rate * seconds
            gpu.pcie_rx_bytes += gpu.pcie_rx_rate * seconds
            gpu.energy_mj += int(gpu.power_mw * seconds)
            for i, rate in enumerate(gpu.nvlink_kib_rate):
                gpu.nvlink_kib[i] += rate * seconds

    def xid(self, index: int, code: int) -> None:
        self.pending_events.append((index, code))

    # --- library ------------------------------------------------------------------------

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.initialised = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: N802
        self._gpu_at(index, "nvmlDeviceGetHandleByIndex")
        return self.handles[index]

    def nvmlDeviceGetIndex(self, handle: Any) -> int:  # noqa: N802
        return self._index(handle)

    # --- per device ---------------------------------------------------------------------

    def _index(self, handle: Any) -> int:
        address = ctypes.addressof(handle.contents)
        for i, h in enumerate(self.handles):
            if ctypes.addressof(h.contents) == address:
                return i
        raise pynvml.NVMLError_InvalidArgument()

    def _gpu_at(self, index: int, function: str) -> FakeGpu:
        gpu = self.gpus[index]
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()
        if function in gpu.failing:
            raise gpu.failing[function]()
        if "*" in gpu.failing:
            raise gpu.failing["*"]()
        return gpu

    def _gpu(self, handle: Any, function: str) -> FakeGpu:
        self.calls.append(function)
        return self._gpu_at(self._index(handle), function)

    def _on(self, function: str) -> Callable[..., Any]:
        return lambda handle, *a: self._gpu(handle, function)

    def nvmlDeviceGetName(self, handle: Any) -> str:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:  # noqa: N802
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu(handle, "nvmlDeviceGetPciInfo").bus_id.encode()
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo" + ("_v2" if version else ""))
        free = gpu.total - gpu.reserved - gpu.used
        if version:  # v2: used excludes what the driver reserves
            return pynvml.c_nvmlMemory_v2_t(version, gpu.total, gpu.reserved, free, gpu.used)
        return pynvml.c_nvmlMemory_t(gpu.total, free, gpu.used + gpu.reserved)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(gpu.util_gpu, gpu.util_memory)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:  # noqa: N802
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature_c

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int) -> int:  # noqa: N802
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperatureV").temperature_c

    def nvmlDeviceGetClockInfo(self, handle: Any, kind: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        return {pynvml.NVML_CLOCK_SM: gpu.sm_mhz, pynvml.NVML_CLOCK_MEM: gpu.mem_mhz}[kind]

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetPcieThroughput")
        return gpu.pcie_throughput_kb[counter]  # TX_BYTES = 0, RX_BYTES = 1

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error: int, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if (error, counter) not in gpu.ecc:
            raise pynvml.NVMLError_NotSupported()  # ECC off or absent
        return gpu.ecc[(error, counter)]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [
            pynvml.nvmlFriendlyObject(
                {"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF,
                 "computeInstanceId": 0xFFFFFFFF}
            )
            for pid, used in gpu.processes
        ]  # fmt: skip

    # --- field values -------------------------------------------------------------------

    def _field(self, gpu: FakeGpu, field_id: int, scope: int) -> float | None:
        links = len(gpu.nvlink_kib)
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return links if links else None
        if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES and gpu.pcie_counters:
            return gpu.pcie_tx_bytes
        if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES and gpu.pcie_counters:
            return gpu.pcie_rx_bytes
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX and scope < links:
            return gpu.nvlink_kib[scope]
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX and scope < links:
            return gpu.nvlink_kib[scope] / 2
        return None

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[Any]) -> Any:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for slot, (field_id, scope) in zip(values, field_ids, strict=True):
            slot.fieldId, slot.scopeId, slot.timestamp = field_id, scope, self.clock_us
            value = self._field(gpu, field_id, scope)
            if value is None:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            slot.nvmlReturn = pynvml.NVML_SUCCESS
            slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            slot.value.ullVal = int(value)
        return values

    # --- GPM ----------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:  # noqa: N802
        gpu = self._gpu(handle, "nvmlGpmQueryDeviceSupport")
        return pynvml.c_nvmlGpmSupport_t(pynvml.NVML_GPM_SUPPORT_VERSION, gpu.gpm is not None)

    def nvmlGpmSampleAlloc(self) -> Any:  # noqa: N802
        sample = ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
        self.samples[ctypes.addressof(sample.contents)] = None
        self._keep = [*getattr(self, "_keep", []), sample]  # its address must stay unique
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:  # noqa: N802
        del self.samples[ctypes.addressof(sample.contents)]

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:  # noqa: N802
        self._gpu(handle, "nvmlGpmSampleGet")
        self.samples[ctypes.addressof(sample.contents)] = (self.clock_us, self._index(handle))
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:  # noqa: N802
        """Checks the request the way NVML does, then serves the GPU's configured percents."""
        self.calls.append("nvmlGpmMetricsGet")
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        pair = (request.sample1, request.sample2)
        first, second = (self.samples[ctypes.addressof(s.contents)] for s in pair)
        if first is None or second is None or first[1] != second[1] or first[0] >= second[0]:
            raise pynvml.NVMLError_InvalidArgument()  # not taken, other GPUs, or out of order
        gpm = self.gpus[second[1]].gpm or {}
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId in gpm:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, gpm[metric.metricId]
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request

    # --- events -------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:  # noqa: N802
        event_set = pynvml.c_nvmlEventSet_t()
        self.event_sets.append(event_set)
        return event_set

    def nvmlEventSetFree(self, event_set: Any) -> None:  # noqa: N802
        self.event_sets.remove(event_set)

    def nvmlDeviceRegisterEvents(self, handle: Any, kinds: int, event_set: Any) -> None:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        if not gpu.xid_events or kinds != pynvml.nvmlEventTypeXidCriticalError:
            raise pynvml.NVMLError_NotSupported()
        self.registered.add(self._index(handle))

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:  # noqa: N802
        assert timeout_ms <= 10, "the tick must not block on events"
        pending = [e for e in self.pending_events if e[0] in self.registered]
        if not pending:
            raise pynvml.NVMLError_Timeout()
        self.pending_events.remove(pending[0])
        data = pynvml.c_nvmlEventData_t()
        data.device = self.handles[pending[0][0]]
        data.eventType = pynvml.nvmlEventTypeXidCriticalError
        data.eventData = pending[0][1]
        return data
