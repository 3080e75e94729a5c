"""What ``xmon ls`` prints: rows of devices as a table (neuron-ls / tpu-info style) or JSON.

JSON is an array with one object per device: numbers are numbers (bytes, ratios 0-1), a value
xmon does not know is ``null``, and lists are ``[]`` rather than ``null`` (neuron-ls' quirks
avoided).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from xmon.model import Device, Job, JobDevice

GIB = 1024**3
COMMAND_WIDTH = 40


@dataclass(frozen=True)
class Holder:
    """A process holding a device: its pid, command line and, with the agent, its job."""

    pid: int
    command: str | None = None
    job_name: str | None = None


@dataclass(frozen=True)
class Row:
    device: Device
    holders: tuple[Holder, ...] = ()
    coords: tuple[int, ...] | None = None  # from an attached job's jax.Device.coords


def job_coords(device: Device, jobs: Iterable[Job]) -> tuple[int, ...] | None:
    """The device's coordinates as a job holding it reports them (jax.Device.coords).

    A job's device matches when it is on the same platform and its local_hardware_id (else its
    id) equals the collector's device index.
    """
    for job in jobs:
        if job.pid not in device.pids:
            continue
        for jd in job.devices:
            local = jd.info.local_hardware_id
            same = (local if local is not None else jd.info.id) == device.index
            if jd.info.platform == device.platform and same and jd.info.coords is not None:
                return jd.info.coords
    return None


# --- JSON ------------------------------------------------------------------------------------


def row_json(row: Row) -> dict[str, Any]:
    d, hw = row.device, row.device.hardware
    return {
        "device": d.index,
        "platform": d.platform,
        "device_kind": d.device_kind,
        "source": d.source,
        "chip": d.chip_index,
        "uuid": d.uuid,
        "pci_bus_id": d.pci_bus_id,
        "device_path": d.device_path,
        "numa_node": d.numa_node,
        "coords": list(row.coords or ()),
        "memory_used_bytes": hw.memory_used_bytes,
        "memory_total_bytes": hw.memory_total_bytes,
        "utilization_ratio": hw.utilization_ratio,
        "duty_cycle_ratio": hw.duty_cycle_ratio,
        "memory_bandwidth_utilization_ratio": hw.memory_bandwidth_utilization_ratio,
        "power_watts": hw.power_watts,
        "temperature_celsius": hw.temperature_celsius,
        "runtime_address": d.runtime_address,
        "processes": [
            {"pid": h.pid, "command": h.command, "job_name": h.job_name} for h in row.holders
        ],
    }


def cpu_device_json(device: JobDevice, holder: dict[str, Any]) -> dict[str, Any]:
    """A CPU device of a JAX job, with the keys of ``row_json`` (what a CPU has not: null)."""
    info, memory = device.info, device.memory
    used = memory.bytes_in_use if memory.bytes_in_use is not None else memory.live_array_bytes
    unknown = ("chip", "uuid", "pci_bus_id", "device_path", "numa_node", "memory_total_bytes",
               "utilization_ratio", "duty_cycle_ratio", "memory_bandwidth_utilization_ratio",
               "power_watts", "temperature_celsius", "runtime_address")  # fmt: skip
    return {
        **dict.fromkeys(unknown),
        "device": info.id, "platform": info.platform, "device_kind": info.device_kind,
        "source": "jax", "coords": [], "memory_used_bytes": used, "processes": [holder],
    }  # fmt: skip


def render_json(rows: Sequence[Row]) -> str:
    return json.dumps([row_json(r) for r in rows], indent=2)


# --- table -----------------------------------------------------------------------------------


def memory_text(used: int | None, total: int | None) -> str:
    """``"9.60 GiB / 16.00 GiB"`` as tpu-info prints it; ``-`` for what is unknown."""
    if used is None and total is None:
        return "-"
    part = ["-" if v is None else f"{v / GIB:.2f} GiB" for v in (used, total)]
    return f"{part[0]} / {part[1]}"


def util_text(device: Device) -> str:
    """Busy share: NVML's utilization for GPUs, the TensorCore duty cycle for TPUs."""
    hw = device.hardware
    ratio = hw.utilization_ratio if hw.utilization_ratio is not None else hw.duty_cycle_ratio
    return "-" if ratio is None else f"{ratio * 100:.1f}%"


def _command(holder: Holder | None, wide: bool) -> str:
    text = (holder.command if holder else None) or "-"
    if holder is not None and holder.job_name:
        text = f"[{holder.job_name}] {text}"
    if not wide and len(text) > COMMAND_WIDTH:
        return text[: COMMAND_WIDTH - 3] + "..."
    return text


def _cells(row: Row, wide: bool) -> list[str]:
    d = row.device
    first = row.holders[0] if row.holders else None
    cells = [
        str(d.index), d.platform, d.device_kind,
        memory_text(d.hardware.memory_used_bytes, d.hardware.memory_total_bytes),
        util_text(d), "x".join(str(c) for c in row.coords) if row.coords else "-",
        ",".join(str(h.pid) for h in row.holders) or "-", _command(first, wide),
    ]  # fmt: skip
    if wide:
        extra = [d.pci_bus_id, d.device_path, d.numa_node, d.chip_index, d.runtime_address]
        cells[6:6] = ["-" if v is None else str(v) for v in extra]
    return cells


HEADER = ["DEVICE", "PLATFORM", "KIND", "MEMORY USED / TOTAL", "UTIL", "COORDS", "PID", "COMMAND"]
WIDE_EXTRA = ["PCI BDF", "PATH", "NUMA", "CHIP", "METRICS FROM"]


def render_table(rows: Sequence[Row], wide: bool = False) -> str:
    header = list(HEADER)
    if wide:
        header[6:6] = WIDE_EXTRA
    lines = [header, *(_cells(r, wide) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
           for line in lines]  # fmt: skip
    return "\n".join(out)
