"""Peak compute, HBM capacity and HBM bandwidth per device kind, for MFU and rooflines.

Every number is **per JAX device**, because MFU divides a per-device FLOP rate (XLA's cost
analysis is per device for SPMD programs) by this table. A JAX device is not always a chip:

* TPU v2/v3: a chip has two TensorCores and JAX shows each as its own device, so the chip's
  vendor numbers are halved (each core also owns half the chip's HBM).
* TPU v4/v5p: the two TensorCores of a chip form one "megacore" device: the chip's numbers.
* TPU v5e/v6e: one TensorCore per chip: the chip's numbers.
* TPU7x (Ironwood): two TensorCores per chip, each its own device (no megacore): halved.
* NVIDIA GPUs: one device per GPU (a MIG slice is not in the table: its peak is a fraction).

FLOP/s are dense bf16 matrix peaks (NVIDIA datasheets print sparse figures with a footnote; the
dense figure is half). HBM capacities are binary (GiB): Google's tables say GiB, and NVIDIA's
"80GB" parts report 81920 MiB. Bandwidths are decimal (1 GB/s = 1e9 B/s) as vendors print
them. Capacities are the spec; collectors should prefer what the device reports.

Unknown kinds (CPU included) have no entry: :meth:`PeakTable.lookup` returns ``None`` and MFU is
reported as absent, never guessed. Operators add kinds or correct numbers with overrides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

GIB = 1024**3
# A nominal per-device CPU peak so the demo's MFU shows a number: CPUs have no entry in the
# table (MFU is absent for unknown kinds), so ``xmon demo`` declares this one (XMON_PEAKS), and
# ``xmon top``'s screenshots of the demo use it too.
DEMO_CPU_PEAK = {"cpu": {"flops_per_second": 5e10, "memory_bytes_per_second": 1e10}}
OVERRIDE_FIELDS = ("flops_per_second", "memory_bytes", "memory_bytes_per_second")


@dataclass(frozen=True)
class Peak:
    """Vendor peak numbers for one JAX device."""

    flops_per_second: float | None  # dense bf16 matrix FLOP/s per JAX device
    memory_bytes: int | None  # HBM capacity per JAX device
    memory_bytes_per_second: float | None  # HBM bandwidth per JAX device
    source: str  # vendor spec URL(s) and how per-device numbers were derived, or "override"
    devices_per_chip: int = 1  # JAX devices per physical chip (2 on TPU v2, v3 and 7x)


_TPU_V2_V3_NOTE = "per JAX device = per TensorCore = chip/2 (two TensorCores per chip)"
_TPU_V2_SRC = (
    "https://dl.acm.org/doi/10.1145/3360307 (TPUv2 chip: 46 TFLOP/s bf16, 16 GiB HBM, "
    f"700 GB/s); {_TPU_V2_V3_NOTE}"
)
_TPU_V3_SRC = (
    "https://cloud.google.com/tpu/docs/v3 (chip: 123 TFLOP/s bf16, 32 GiB, 900 GBps); "
    + _TPU_V2_V3_NOTE
)
_TPU_V4_SRC = (
    "https://cloud.google.com/tpu/docs/v4 (chip: 275 TFLOP/s bf16, 32 GiB, 1200 GBps); "
    "one megacore JAX device per chip"
)
_TPU_V5E_SRC = (
    "https://cloud.google.com/tpu/docs/v5e (chip: 197 TFLOP/s bf16, 16 GB HBM, 819 GBps); "
    "16 GB taken as 16 GiB, as in JAX's pallas tpu_info table (17.2e9 B)"
)
_TPU_V5P_SRC = (
    "https://cloud.google.com/tpu/docs/v5p (chip: 459 TFLOP/s bf16, 95 GiB, 2765 GBps); "
    "one megacore JAX device per chip"
)
_TPU_V6E_SRC = "https://cloud.google.com/tpu/docs/v6e (chip: 918 TFLOP/s bf16, 32 GiB, 1638 GBps)"
_TPU_7X_SRC = (
    "https://cloud.google.com/tpu/docs/tpu7x (chip: 2307 TFLOP/s bf16, 192 GiB, 7380 GBps, "
    "two TensorCores each exposed as its own device); per JAX device = chip/2"
)
_A100_SRC = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (BF16 Tensor Core 312 TFLOPS dense)"
)
_H100_SRC = (
    "https://www.nvidia.com/en-us/data-center/h100/ (BF16 Tensor Core {sparse} TFLOPS with "
    "sparsity; dense = half)"
)
_H200_SRC = (
    "https://www.nvidia.com/en-us/data-center/h200/ (BF16 Tensor Core {sparse} TFLOPS with "
    "sparsity; dense = half; 141 GB, 4.8 TB/s)"
)
_B200_SRC = (
    "https://www.nvidia.com/en-us/data-center/dgx-b200/ and https://www.nvidia.com/en-us/"
    "data-center/hgx/ (HGX B200, 8 GPUs: FP16/BF16 36 PFLOPS with sparsity, 1.4 TB HBM3e, "
    "64 TB/s); per GPU = /8, dense = half: 2.25 PFLOP/s, 180 GB, 8 TB/s"
)

# Keys are normalised device kinds (see normalize_device_kind): JAX's device_kind for TPUs,
# the CUDA/NVML device name for NVIDIA GPUs.
DEFAULT_PEAKS: dict[str, Peak] = {
    "tpu v2": Peak(23e12, 8 * GIB, 350e9, _TPU_V2_SRC, devices_per_chip=2),
    "tpu v3": Peak(61.5e12, 16 * GIB, 450e9, _TPU_V3_SRC, devices_per_chip=2),
    "tpu v4": Peak(275e12, 32 * GIB, 1200e9, _TPU_V4_SRC),
    "tpu v5 lite": Peak(197e12, 16 * GIB, 819e9, _TPU_V5E_SRC),
    "tpu v5": Peak(459e12, 95 * GIB, 2765e9, _TPU_V5P_SRC),
    "tpu v6 lite": Peak(918e12, 32 * GIB, 1638e9, _TPU_V6E_SRC),
    "tpu7x": Peak(1153.5e12, 96 * GIB, 3690e9, _TPU_7X_SRC, devices_per_chip=2),
    "nvidia a100-sxm4-40gb": Peak(312e12, 40 * GIB, 1555e9, _A100_SRC + "; 40GB SXM 1,555GB/s"),
    "nvidia a100-pcie-40gb": Peak(312e12, 40 * GIB, 1555e9, _A100_SRC + "; 40GB PCIe 1,555GB/s"),
    "nvidia a100-sxm4-80gb": Peak(312e12, 80 * GIB, 2039e9, _A100_SRC + "; 80GB SXM 2,039GB/s"),
    "nvidia a100 80gb pcie": Peak(312e12, 80 * GIB, 1935e9, _A100_SRC + "; 80GB PCIe 1,935GB/s"),
    "nvidia h100 80gb hbm3": Peak(
        989.5e12, 80 * GIB, 3.35e12, _H100_SRC.format(sparse="1,979") + "; H100 SXM 80GB 3.35TB/s"
    ),
    "nvidia h100 pcie": Peak(
        756.5e12, 80 * GIB, 2.0e12, _H100_SRC.format(sparse="1,513") + "; H100 PCIe 80GB 2TB/s"
    ),
    "nvidia h100 nvl": Peak(
        835.5e12, 94 * GIB, 3.9e12, _H100_SRC.format(sparse="1,671") + "; H100 NVL 94GB 3.9TB/s"
    ),
    "nvidia h200": Peak(989.5e12, 141 * GIB, 4.8e12, _H200_SRC.format(sparse="1,979") + "; SXM"),
    "nvidia h200 nvl": Peak(
        835.5e12, 141 * GIB, 4.8e12, _H200_SRC.format(sparse="1,671") + "; NVL"
    ),
    "nvidia b200": Peak(2.25e15, 180 * GIB, 8.0e12, _B200_SRC),
}

# Other spellings of the same devices: tpu-info/PCI chip names (what the hardware collectors
# see), Google's marketing names, and NVML names that differ from the CUDA ones.
ALIASES: dict[str, str] = {
    "v2": "tpu v2",
    "v3": "tpu v3",
    "v4": "tpu v4",
    "v5e": "tpu v5 lite",
    "tpu v5e": "tpu v5 lite",
    "v5p": "tpu v5",
    "tpu v5p": "tpu v5",
    "v6e": "tpu v6 lite",
    "tpu v6e": "tpu v6 lite",
    "7x": "tpu7x",
    "v7x": "tpu7x",
    "tpu 7x": "tpu7x",
    "tpu v7x": "tpu7x",
    "nvidia a100-sxm-80gb": "nvidia a100-sxm4-80gb",
}


def normalize_device_kind(device_kind: str) -> str:
    """Case- and whitespace-insensitive form: "  TPU  v5 Lite " -> "tpu v5 lite"."""
    return " ".join(device_kind.split()).casefold()


def _candidates(kind: str) -> list[str]:
    """Normalised spellings to try, most exact first.

    Rules beyond the alias table, each narrow enough never to name another device:
    tpu-info prints chips as "TPU v5e chip" (drop the " chip"), and NVIDIA names may come
    without the vendor prefix ("H100 80GB HBM3"). Nothing matches by prefix alone, so a MIG
    slice ("NVIDIA H100 80GB HBM3 MIG 1g.10gb") stays unknown instead of getting a full GPU.
    """
    names = [kind]
    if kind.endswith(" chip"):
        names.append(kind.removesuffix(" chip"))
    if not kind.startswith("nvidia "):
        names.append("nvidia " + kind)
    return names


class PeakTable:
    """The default peaks plus operator overrides, looked up by any spelling of a device kind."""

    def __init__(self, overrides: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._peaks: dict[str, Peak] = dict(DEFAULT_PEAKS)
        for kind, fields in (overrides or {}).items():
            self._apply_override(kind, fields)
        # The table is fixed from here on; the daemon looks up every device of every job each
        # period, so each spelling is resolved once.
        self._found: dict[str, Peak | None] = {}

    def _resolve(self, kind: str) -> str | None:
        for name in _candidates(normalize_device_kind(kind)):
            name = ALIASES.get(name, name)
            if name in self._peaks:
                return name
        return None

    def _apply_override(self, kind: object, fields: object) -> None:
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError(f"peak override: device kind must be a non-empty string, got {kind!r}")
        values = validate_override(kind, fields)
        key = self._resolve(kind) or normalize_device_kind(kind)
        base = self._peaks.get(key, Peak(None, None, None, "override"))
        memory = values.get("memory_bytes")
        self._peaks[key] = replace(
            base,
            flops_per_second=values.get("flops_per_second", base.flops_per_second),
            memory_bytes=base.memory_bytes if memory is None else int(memory),
            memory_bytes_per_second=values.get(
                "memory_bytes_per_second", base.memory_bytes_per_second
            ),
            source="override",
        )

    def lookup(self, device_kind: str) -> Peak | None:
        """Peak of one JAX device of this kind, or None when the kind is unknown (CPU too)."""
        if not isinstance(device_kind, str):
            return None
        if device_kind not in self._found:
            key = self._resolve(device_kind)
            self._found[device_kind] = None if key is None else self._peaks[key]
        return self._found[device_kind]

    def kinds(self) -> list[str]:
        """Normalised keys known to this table, overrides included."""
        return sorted(self._peaks)


def validate_override(kind: str, fields: object) -> dict[str, float]:
    """Check one override entry and return its values as floats.

    Raises ValueError naming the kind and field for unknown fields and for values that are
    not positive finite numbers.
    """
    if not isinstance(fields, Mapping):
        raise ValueError(f"peak override {kind!r}: expected a mapping of {OVERRIDE_FIELDS}")
    values: dict[str, float] = {}
    for name, raw in fields.items():
        if name not in OVERRIDE_FIELDS:
            valid = ", ".join(OVERRIDE_FIELDS)
            raise ValueError(f"peak override {kind!r}: unknown field {name!r}; valid: {valid}")
        number = _positive_number(raw)
        if number is None:
            raise ValueError(
                f"peak override {kind!r}.{name}: must be a positive finite number, got {raw!r}"
            )
        values[name] = number
    return values


def _positive_number(raw: object) -> float | None:
    # Numbers from TOML or JSON, or numeric strings from environment variables; bool is an int
    # subclass in Python but never a meaningful peak.
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        try:
            raw = float(raw)
        except ValueError:
            return None
    if not isinstance(raw, int | float):
        return None
    number = float(raw)
    return number if math.isfinite(number) and number > 0 else None


def ridge_point(peak: Peak | None) -> float | None:
    """Roofline ridge point in FLOPs per byte: peak FLOP/s over peak HBM bytes/s.

    Programs whose arithmetic intensity is below it are memory-bound on this device.
    """
    if peak is None or peak.flops_per_second is None or not peak.memory_bytes_per_second:
        return None
    return peak.flops_per_second / peak.memory_bytes_per_second
