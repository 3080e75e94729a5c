"""Find TPU chips without jax or libtpu: PCI functions in sysfs, their holders in procfs.

Both roots are arguments (node_exporter's ``--path.sysfs`` / ``--path.procfs``), so tests run
against fixture trees and a containerised daemon can read the host's. Nothing here raises on a
missing or unreadable file: an unreadable ``/proc/PID`` (another user's process, a restricted
container) just contributes nothing, where tpu-info crashes with PermissionError.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("xmon.collectors.tpu")

GOOGLE_PCI_VENDOR = "0x1ae0"
# PCI base classes an unknown Google device must have to count as a TPU: 0x12 "processing
# accelerator", 0xff "unassigned" (what lspci shows for TPU v4 chips).
ACCELERATOR_CLASSES = ("0x12", "0xff")
DEFAULT_METRICS_PORT = 8431  # libtpu's runtime metrics server (TPU_RUNTIME_METRICS_PORTS)
_DEV_NODE = re.compile(r"/dev/(?:accel\d+|vfio/\d+)\Z")


@dataclass(frozen=True)
class Generation:
    """One TPU generation as PCI, JAX and tpu-info name it."""

    name: str  # tpu-info's short name: "v5e", "7x"
    device_kind: str  # jax.Device.device_kind: "TPU v5 lite" (the peak table's key)
    devices_per_chip: int  # JAX devices per chip: 2 where each TensorCore is its own device
    dev_node: str  # "accel" (/dev/accelN, v2-v4) or "vfio" (/dev/vfio/N, v5e and later)


# (PCI device id, subsystem device id or None for any) -> generation. Ids from tpu-info 0.14.2
# (tpu_info/device.py, TpuChip.from_pci_device_id); device kinds from JAX's
# jax/_src/pallas/mosaic/tpu_info.py. A new generation is one line here.
GENERATIONS: dict[tuple[str, str | None], Generation] = {
    ("0x0027", "0x004e"): Generation("v2", "TPU v2", 2, "accel"),
    ("0x0027", "0x004f"): Generation("v3", "TPU v3", 2, "accel"),
    ("0x005e", None): Generation("v4", "TPU v4", 1, "accel"),
    ("0x0063", None): Generation("v5e", "TPU v5 lite", 1, "vfio"),
    ("0x0062", None): Generation("v5p", "TPU v5", 1, "vfio"),
    ("0x006f", None): Generation("v6e", "TPU v6 lite", 1, "vfio"),
    ("0x0076", None): Generation("7x", "TPU7x", 2, "vfio"),
}


@dataclass(frozen=True)
class TpuFunction:
    """One Google PCI function that is a TPU (a chip, or one core of a chip on 7x)."""

    bdf: str  # PCI address, "0000:00:04.0"
    generation: Generation
    device_path: str | None  # /dev/vfio/<iommu group> or /dev/accelN
    numa_node: int | None


@dataclass(frozen=True)
class TpuSlot:
    """One JAX-visible TPU device: what xmon reports as a Device."""

    index: int
    chip_index: int
    generation: Generation
    function: TpuFunction


# --- sysfs -------------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def generation_of(device_id: str, subsystem: str | None, pci_class: str | None) -> Generation:
    """The generation of a Google PCI function, or a generic one for an unknown TPU id.

    Unknown ids count only with an accelerator class, because Google's virtual NIC (gVNIC)
    and NVMe disks share the vendor id.
    """
    known = GENERATIONS.get((device_id, subsystem)) or GENERATIONS.get((device_id, None))
    if known is not None:
        return known
    if pci_class is not None and pci_class.startswith(ACCELERATOR_CLASSES):
        return Generation(f"unknown (PCI device {device_id})", "TPU", 1, "vfio")
    raise KeyError(device_id)


def _function(entry: Path) -> TpuFunction | None:
    if _read(entry / "vendor") != GOOGLE_PCI_VENDOR:
        return None
    device_id = _read(entry / "device")
    if device_id is None:
        return None
    try:
        generation = generation_of(
            device_id, _read(entry / "subsystem_device"), _read(entry / "class")
        )
    except KeyError:
        return None  # gVNIC, NVMe, ...: not an accelerator
    numa = _read(entry / "numa_node")
    return TpuFunction(
        bdf=entry.name,
        generation=generation,
        device_path=_device_path(entry, generation),
        numa_node=int(numa) if numa is not None and numa.isdigit() else None,
    )


def _device_path(entry: Path, generation: Generation) -> str | None:
    """vfio: the IOMMU group's node (as tpu-info's get_chips); accel: the accel class child."""
    if generation.dev_node == "vfio":
        try:
            return f"/dev/vfio/{os.path.basename(os.readlink(entry / 'iommu_group'))}"
        except OSError:
            return None
    try:
        names = sorted(p.name for p in (entry / "accel").iterdir() if p.name.startswith("accel"))
    except OSError:
        return None
    return f"/dev/{names[0]}" if names else None


def _natural(text: str | None) -> list[int | str]:
    """Sort key that puts /dev/vfio/10 after /dev/vfio/9."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text or "")]


def discover_functions(sysfs_root: Path) -> list[TpuFunction]:
    """TPU PCI functions under ``<sysfs_root>/bus/pci/devices``, in tpu-info's chip order."""
    try:
        entries = list((sysfs_root / "bus" / "pci" / "devices").iterdir())
    except OSError:
        return []
    functions = [f for f in map(_function, entries) if f is not None]
    return sorted(functions, key=lambda f: (_natural(f.device_path), f.bdf))


def device_slots(functions: Iterable[TpuFunction]) -> list[TpuSlot]:
    """One slot per JAX device: functions grouped into chips by PCI base address.

    Where a chip exposes fewer functions than it has JAX devices (v2, v3: two TensorCores
    behind one /dev/accel node), its devices share the chip's function.
    """
    chips: dict[str, list[TpuFunction]] = {}
    for function in functions:
        chips.setdefault(function.bdf.rsplit(".", 1)[0], []).append(function)
    slots: list[TpuSlot] = []
    for chip_index, members in enumerate(chips.values()):
        per_chip = max(len(members), members[0].generation.devices_per_chip)
        for k in range(per_chip):
            function = members[k * len(members) // per_chip]
            slots.append(TpuSlot(len(slots), chip_index, function.generation, function))
    return slots


# --- procfs ------------------------------------------------------------------------------------


def _pids(procfs_root: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in procfs_root.iterdir() if p.name.isdigit())
    except OSError:
        return []


def device_holders(procfs_root: Path, paths: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """{device path: pids with it open}, from ``/proc/*/fd/*`` links (as tpu-info does)."""
    wanted = set(paths)
    holders: dict[str, set[int]] = {path: set() for path in wanted}
    for pid in _pids(procfs_root) if wanted else []:
        fd_dir = procfs_root / str(pid) / "fd"
        try:
            links = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:  # gone, or not ours to read
            continue
        for target in links:
            if target in holders and _DEV_NODE.match(target):
                holders[target].add(pid)
    return {path: tuple(sorted(pids)) for path, pids in holders.items()}


def read_environ(procfs_root: Path, pid: int) -> dict[str, str] | None:
    """The environment a process was started with, or None if it cannot be read."""
    try:
        raw = (procfs_root / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def read_command(procfs_root: Path, pid: int) -> str | None:
    """The command line of a process (``/proc/PID/cmdline``, else its ``comm``)."""
    try:
        raw = (procfs_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        raw = b""
    args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    if args:
        return " ".join(args)
    return _read(procfs_root / str(pid) / "comm")


def metrics_addresses(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The libtpu metrics servers a process with this environment serves.

    ``TPU_RUNTIME_METRICS_ADDRESS`` (a HOST:PORT or a unix socket path) wins; else one
    ``localhost:PORT`` per entry of ``TPU_RUNTIME_METRICS_PORTS``; else nothing.
    """
    address = environ.get("TPU_RUNTIME_METRICS_ADDRESS", "").strip()
    if address:
        return (f"unix:{address}",) if address.startswith("/") else (address,)
    ports = environ.get("TPU_RUNTIME_METRICS_PORTS", "")
    valid = [p.strip() for p in ports.split(",") if p.strip().isdigit()]
    return tuple(f"localhost:{p}" for p in valid if 0 < int(p) <= 65535)
