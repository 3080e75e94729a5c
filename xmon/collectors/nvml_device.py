"""One NVML pass over one GPU: the calls, the unit conversions and the rates.

``nv`` is the pynvml module (nvidia-ml-py) or anything with the same names; every call goes
through :class:`~xmon.collectors.nvml_calls.NvmlPass`, which turns an NVML error into ``None``
for that one field, so an unsupported counter or a device that fails half-way through a read
never takes the other fields, the other devices or the collector down.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from xmon.collectors.nvml_calls import NvmlPass
from xmon.collectors.nvml_gpm import GpmSampler
from xmon.model import Device, DeviceProcess, HardwareCounters

KIB = 1024
CounterKey = tuple[str, int]  # (counter name, NVLink link or 0)


@dataclass
class GpuState:
    """What the collector keeps per GPU between ticks."""

    index: int  # NVML index (PCI bus order, not CUDA_VISIBLE_DEVICES order)
    handle: Any
    name: str  # nvmlDeviceGetName, e.g. "NVIDIA H100 80GB HBM3" (what JAX calls device_kind)
    uuid: str | None = None  # nvmlDeviceGetUUID
    pci_bus_id: str | None = None  # nvmlDeviceGetPciInfo().busId, e.g. "00000000:01:00.0"
    nvlink_links: int = 0  # field NVML_FI_DEV_NVLINK_LINK_COUNT
    memory_v2: bool = True  # False once nvmlDeviceGetMemoryInfo_v2 turned out missing
    pcie_counters: bool = True  # False once the PCIe byte counter fields turned out missing
    gpm: GpmSampler | None = None
    counters: dict[CounterKey, tuple[float, float]] = field(default_factory=dict)  # last reading
    rates: dict[CounterKey, float | None] = field(default_factory=dict)  # last rate of each
    xid_errors_total: int | None = None  # None until XID events are registered
    last_xid: int | None = None
    errors: tuple[str, ...] = ()  # the last pass's unexpected errors (logged on change)


def text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def open_gpu(nv: Any, index: int, handle: Any) -> GpuState:
    """Static facts, read once: NVML does not change them while the driver is loaded."""
    p = NvmlPass(nv)
    pci = p.get("nvmlDeviceGetPciInfo", handle)
    state = GpuState(
        index=index,
        handle=handle,
        name=text(p.get("nvmlDeviceGetName", handle)) or "NVIDIA GPU",
        uuid=text(p.get("nvmlDeviceGetUUID", handle)),
        pci_bus_id=None if pci is None else text(pci.busId),
    )
    links = _field_values(p, handle, [(nv.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)])[0]
    state.nvlink_links = 0 if links is None else int(links[0])
    v2 = p.get("nvmlDeviceGetMemoryInfo", handle, version=nv.nvmlMemory_v2)
    state.memory_v2 = v2 is not None or p.get("nvmlDeviceGetMemoryInfo", handle) is None
    pcie = _field_values(p, handle, pcie_fields(nv))
    state.pcie_counters = all(v is not None for v in pcie)
    state.gpm = GpmSampler.start(p, handle)
    state.errors = tuple(p.errors)
    return state


# --- maths ------------------------------------------------------------------------------------


def counter_rate(
    previous: tuple[float, float] | None, current: tuple[float, float], scale: float = 1.0
) -> float | None:
    """Per-second rate between two (value, seconds) readings of a counter, times ``scale``.

    None for the first reading, when no time passed, and when the counter went backwards
    (NVML's counters wrap, and a driver reload resets them).
    """
    if previous is None:
        return None
    dv, dt = current[0] - previous[0], current[1] - previous[1]
    if dt <= 0 or dv < 0:
        return None
    return dv / dt * scale


def ratio(percent: float | None) -> float | None:
    """NVML percent (0-100) as a 0-1 ratio; None for a missing or non-finite value."""
    if percent is None or not math.isfinite(percent):
        return None
    return min(1.0, max(0.0, float(percent) / 100.0))


def scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else float(value) * factor


def sum_known(values: Iterable[float | None]) -> float | None:
    """Sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# --- field values -----------------------------------------------------------------------------

# c_nvmlValue_t member by nvmlValueType_t (NVML_VALUE_TYPE_DOUBLE = 0, ...)
_UNION_MEMBER = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_value(nv: Any, fv: Any) -> tuple[float, float] | None:
    """(value, seconds) of one nvmlFieldValue_t; None when NVML returned an error for it."""
    if fv.nvmlReturn != nv.NVML_SUCCESS:
        return None
    kind = int(fv.valueType)
    if not 0 <= kind < len(_UNION_MEMBER):
        return None
    # NVML stamps each value in µs since 1970; stamp an unstamped one now, on the same clock
    seconds = float(fv.timestamp) / 1e6 if fv.timestamp > 0 else time.time()
    return float(getattr(fv.value, _UNION_MEMBER[kind])), seconds


def _field_values(
    p: NvmlPass, handle: Any, fields: list[tuple[int, int]]
) -> list[tuple[float, float] | None]:
    """One nvmlDeviceGetFieldValues call for many (field id, scope) pairs."""
    values = p.get("nvmlDeviceGetFieldValues", handle, fields) if fields else None
    if values is None:
        return [None] * len(fields)
    return [field_value(p.nv, values[i]) for i in range(len(fields))]


def pcie_fields(nv: Any) -> list[tuple[int, int]]:
    return [(nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)]


def _counter_fields(nv: Any, state: GpuState) -> list[tuple[CounterKey, tuple[int, int], float]]:
    """(key, (field id, scope), bytes per unit) of each byte counter read this tick."""
    fields: list[tuple[CounterKey, tuple[int, int], float]] = []
    if state.pcie_counters:
        tx, rx = pcie_fields(nv)
        fields += [(("pcie_tx", 0), tx, 1.0), (("pcie_rx", 0), rx, 1.0)]
    for link in range(state.nvlink_links):  # NVLink counters count KiB, per link
        fields.append((("nvlink_tx", link), (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link), KIB))
        fields.append((("nvlink_rx", link), (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link), KIB))
    return fields


def read_throughput(p: NvmlPass, state: GpuState) -> dict[str, float | None]:
    """PCIe and NVLink bytes per second, from byte counters read one tick apart.

    Where the PCIe byte counter fields are missing (older GPUs or drivers), PCIe comes from
    nvmlDeviceGetPcieThroughput instead, which samples for 20 ms per direction inside NVML.
    """
    spec = _counter_fields(p.nv, state)
    values = _field_values(p, state.handle, [f for _, f, _ in spec])
    rates: dict[str, list[float | None]] = {}
    for (key, _, scale), value in zip(spec, values, strict=True):
        rates.setdefault(key[0], []).append(_advance(state, key, value, scale))
    out = {name: sum_known(rates.get(name, ())) for name in ("nvlink_tx", "nvlink_rx")}
    if state.pcie_counters:
        out["pcie_tx"], out["pcie_rx"] = rates["pcie_tx"][0], rates["pcie_rx"][0]
    else:
        nv = p.nv
        for name, counter in (("pcie_tx", nv.NVML_PCIE_UTIL_TX_BYTES),
                              ("pcie_rx", nv.NVML_PCIE_UTIL_RX_BYTES)):  # fmt: skip
            out[name] = scaled(p.get("nvmlDeviceGetPcieThroughput", state.handle, counter), KIB)
    return out


def _advance(
    state: GpuState, key: CounterKey, value: tuple[float, float] | None, scale: float
) -> float | None:
    """Rate of one counter since its last reading, remembering this reading.

    NVML refreshes some counters less often than xmon ticks; a reading with the same timestamp
    as the last one repeats the last rate instead of dropping to nothing.
    """
    previous = state.counters.get(key)
    if value is None:
        state.counters.pop(key, None)
        state.rates.pop(key, None)
        return None
    if previous is not None and value[1] == previous[1]:
        return state.rates.get(key)
    rate = counter_rate(previous, value, scale)
    state.counters[key], state.rates[key] = value, rate
    return rate


# --- one pass ---------------------------------------------------------------------------------


def read_memory(p: NvmlPass, state: GpuState) -> dict[str, Any]:
    """Used, total and (v2 only) reserved bytes. v1's ``used`` includes the reserved part."""
    nv, h = p.nv, state.handle
    if state.memory_v2:
        info = p.get("nvmlDeviceGetMemoryInfo", h, version=nv.nvmlMemory_v2)
        reserved = None if info is None else int(info.reserved)
    else:
        info, reserved = p.get("nvmlDeviceGetMemoryInfo", h), None
    return dict(
        memory_used_bytes=None if info is None else int(info.used),
        memory_total_bytes=None if info is None else int(info.total),
        memory_reserved_bytes=reserved,
    )


def read_power_and_clocks(p: NvmlPass, handle: Any) -> dict[str, Any]:
    nv = p.nv
    utilization = p.get("nvmlDeviceGetUtilizationRates", handle)
    return dict(
        utilization_ratio=None if utilization is None else ratio(utilization.gpu),
        memory_busy_ratio=None if utilization is None else ratio(utilization.memory),
        power_watts=scaled(p.get("nvmlDeviceGetPowerUsage", handle), 1e-3),  # mW
        power_limit_watts=scaled(p.get("nvmlDeviceGetEnforcedPowerLimit", handle), 1e-3),
        energy_joules_total=scaled(p.get("nvmlDeviceGetTotalEnergyConsumption", handle), 1e-3),
        temperature_celsius=scaled(read_temperature(p, handle), 1.0),
        sm_clock_hertz=scaled(p.get("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM), 1e6),
        memory_clock_hertz=scaled(p.get("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_MEM), 1e6),
    )


def read_temperature(p: NvmlPass, handle: Any) -> float | None:
    """GPU core temperature; nvmlDeviceGetTemperatureV where the driver has it (the older call
    is deprecated)."""
    sensor = p.nv.NVML_TEMPERATURE_GPU
    value = p.get("nvmlDeviceGetTemperatureV", handle, sensor)
    return value if value is not None else p.get("nvmlDeviceGetTemperature", handle, sensor)


def read_ecc(p: NvmlPass, handle: Any) -> dict[str, Any]:
    """ECC error counts; all None where ECC is off or absent (NVML says NotSupported)."""
    nv = p.nv
    out: dict[str, Any] = {}
    for kind, error_type in (("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                             ("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):  # fmt: skip
        for suffix, counter in (("", nv.NVML_VOLATILE_ECC), ("_aggregate", nv.NVML_AGGREGATE_ECC)):
            value = p.get("nvmlDeviceGetTotalEccErrors", handle, error_type, counter)
            out[f"ecc_{kind}_errors{suffix}_total"] = None if value is None else int(value)
    return out


def read_processes(p: NvmlPass, handle: Any) -> tuple[DeviceProcess, ...]:
    """Compute processes and their memory; a pid with several contexts is summed."""
    memory: dict[int, float | None] = {}
    for process in p.get("nvmlDeviceGetComputeRunningProcesses", handle) or ():
        pid, used = int(process.pid), process.usedGpuMemory  # None where the driver can't tell
        memory[pid] = sum_known((memory.get(pid), used)) if pid in memory else used
    return tuple(DeviceProcess(pid, _int(memory[pid])) for pid in sorted(memory))


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def read_gpm(p: NvmlPass, state: GpuState) -> dict[str, Any]:
    return state.gpm.read(p) if state.gpm is not None else {}


def read_gpu(nv: Any, state: GpuState) -> Device:
    """One pass over one GPU: every counter xmon exports, each None where unsupported."""
    p = NvmlPass(nv)
    throughput = read_throughput(p, state)
    hardware = HardwareCounters(
        **read_memory(p, state),
        **read_power_and_clocks(p, state.handle),
        **read_gpm(p, state),
        pcie_tx_bytes_per_second=throughput["pcie_tx"],
        pcie_rx_bytes_per_second=throughput["pcie_rx"],
        nvlink_tx_bytes_per_second=throughput["nvlink_tx"],
        nvlink_rx_bytes_per_second=throughput["nvlink_rx"],
        **read_ecc(p, state.handle),
        xid_errors_total=state.xid_errors_total,
        last_xid=state.last_xid,
    )
    processes = read_processes(p, state.handle)
    state.errors = tuple(dict.fromkeys(p.errors))
    return Device(
        index=state.index, platform="gpu", device_kind=state.name, source="nvml",
        hardware=hardware, uuid=state.uuid, pci_bus_id=state.pci_bus_id,
        pids=tuple(process.pid for process in processes), processes=processes,
    )  # fmt: skip
