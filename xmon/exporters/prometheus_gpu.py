"""The GPU series of a device (the nvml collector's fields of HardwareCounters)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from xmon.model import Device, HardwareCounters

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder

Value = int | float | None

GPU_VALUES: tuple[tuple[str, Callable[[HardwareCounters], Value]], ...] = (
    ("xmon_device_memory_reserved_bytes", lambda h: h.memory_reserved_bytes),
    ("xmon_device_memory_busy_ratio", lambda h: h.memory_busy_ratio),
    ("xmon_device_sm_active_ratio", lambda h: h.sm_active_ratio),
    ("xmon_device_sm_occupancy_ratio", lambda h: h.sm_occupancy_ratio),
    ("xmon_device_tensor_active_ratio", lambda h: h.tensor_active_ratio),
    ("xmon_device_dram_active_ratio", lambda h: h.dram_active_ratio),
    ("xmon_device_power_limit_watts", lambda h: h.power_limit_watts),
    ("xmon_device_energy_joules_total", lambda h: h.energy_joules_total),
    ("xmon_device_sm_clock_hertz", lambda h: h.sm_clock_hertz),
    ("xmon_device_memory_clock_hertz", lambda h: h.memory_clock_hertz),
    ("xmon_device_pcie_tx_bytes_per_second", lambda h: h.pcie_tx_bytes_per_second),
    ("xmon_device_pcie_rx_bytes_per_second", lambda h: h.pcie_rx_bytes_per_second),
    ("xmon_device_nvlink_tx_bytes_per_second", lambda h: h.nvlink_tx_bytes_per_second),
    ("xmon_device_nvlink_rx_bytes_per_second", lambda h: h.nvlink_rx_bytes_per_second),
    ("xmon_device_xid_errors_total", lambda h: h.xid_errors_total),
    ("xmon_device_last_xid", lambda h: h.last_xid),
)

ECC: tuple[tuple[str, str, Callable[[HardwareCounters], Value]], ...] = (
    ("xmon_device_ecc_errors_total", "corrected", lambda h: h.ecc_corrected_errors_total),
    ("xmon_device_ecc_errors_total", "uncorrected", lambda h: h.ecc_uncorrected_errors_total),
    ("xmon_device_ecc_errors_aggregate_total", "corrected",
     lambda h: h.ecc_corrected_errors_aggregate_total),
    ("xmon_device_ecc_errors_aggregate_total", "uncorrected",
     lambda h: h.ecc_uncorrected_errors_aggregate_total),
)  # fmt: skip


def add_gpu_series(
    b: FamilyBuilder, d: Device, key: tuple[object, ...], job_names: Mapping[int, str]
) -> None:
    """Every GPU series of one device; ``job_names`` maps agent pids to their job's name."""
    hw = d.hardware
    for name, get in GPU_VALUES:
        b.add(name, key, get(hw))
    for name, error_type, get in ECC:
        b.add(name, (*key, error_type), get(hw))
    for process in d.processes:
        labels = (*key, process.pid, job_names.get(process.pid, ""))
        b.add("xmon_device_process_memory_used_bytes", labels, process.memory_used_bytes)
