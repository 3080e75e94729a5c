"""Peak table: device-kind spellings, overrides, ridge point and sanity of every entry."""

from __future__ import annotations

import math

import pytest

from xmon.analysis.peaks import (
    ALIASES,
    DEFAULT_PEAKS,
    GIB,
    Peak,
    PeakTable,
    normalize_device_kind,
    ridge_point,
)

# (spelling as some source reports it, normalised key it must resolve to)
LOOKUPS = [
    # JAX device_kind strings
    ("TPU v2", "tpu v2"),
    ("TPU v3", "tpu v3"),
    ("TPU v4", "tpu v4"),
    ("TPU v5 lite", "tpu v5 lite"),
    ("TPU v5", "tpu v5"),
    ("TPU v6 lite", "tpu v6 lite"),
    ("TPU7x", "tpu7x"),
    # spellings JAX's pallas tpu_info also accepts
    ("TPU v5e", "tpu v5 lite"),
    ("TPU v5p", "tpu v5"),
    ("TPU v6e", "tpu v6 lite"),
    # tpu-info / PCI chip names used by the hardware collectors
    ("v2", "tpu v2"),
    ("v3", "tpu v3"),
    ("v4", "tpu v4"),
    ("v5e", "tpu v5 lite"),
    ("v5p", "tpu v5"),
    ("v6e", "tpu v6 lite"),
    ("7x", "tpu7x"),
    ("TPU v5e chip", "tpu v5 lite"),
    ("TPU7x chip", "tpu7x"),
    # CUDA device names (NVML reports the same strings)
    ("NVIDIA A100-SXM4-40GB", "nvidia a100-sxm4-40gb"),
    ("NVIDIA A100-SXM4-80GB", "nvidia a100-sxm4-80gb"),
    ("NVIDIA A100-SXM-80GB", "nvidia a100-sxm4-80gb"),
    ("NVIDIA A100-PCIE-40GB", "nvidia a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "nvidia a100 80gb pcie"),
    ("NVIDIA H100 80GB HBM3", "nvidia h100 80gb hbm3"),
    ("NVIDIA H100 PCIe", "nvidia h100 pcie"),
    ("NVIDIA H100 NVL", "nvidia h100 nvl"),
    ("NVIDIA H200", "nvidia h200"),
    ("NVIDIA H200 NVL", "nvidia h200 nvl"),
    ("NVIDIA B200", "nvidia b200"),
    # case, whitespace and a missing vendor prefix
    ("  tpu   V6 LITE ", "tpu v6 lite"),
    ("nvidia h100 80gb hbm3", "nvidia h100 80gb hbm3"),
    ("H100 80GB HBM3", "nvidia h100 80gb hbm3"),
]


@pytest.mark.parametrize(("kind", "key"), LOOKUPS)
def test_lookup_resolves_every_spelling(kind: str, key: str) -> None:
    assert PeakTable().lookup(kind) is DEFAULT_PEAKS[key]


@pytest.mark.parametrize(
    "kind",
    [
        "cpu",
        "CPU",
        "",
        "   ",
        "TPU v4 lite",  # inference chip (v4i): no public vendor spec
        "TPU v5 lite pod",
        "NVIDIA H100",  # bare name: 94GB-SXM or other variant, spec unknown
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a MIG slice has a fraction of the peak
        "NVIDIA H100 80GB HBM3 extra",
        "NVIDIA GH200 480GB",
        "NVIDIA A100",
        "Tesla V100-SXM2-16GB",
        "v5",  # ambiguous: v5e or v5p
        "h100",
    ],
)
def test_unknown_kinds_have_no_peak(kind: str) -> None:
    assert PeakTable().lookup(kind) is None


def test_lookup_of_non_string_is_none() -> None:
    assert PeakTable().lookup(None) is None  # type: ignore[arg-type]


def test_every_alias_points_at_an_entry() -> None:
    for alias, key in ALIASES.items():
        assert key in DEFAULT_PEAKS, alias
        assert normalize_device_kind(alias) == alias


@pytest.mark.parametrize(("key", "peak"), sorted(DEFAULT_PEAKS.items()))
def test_every_entry_is_plausible_and_sourced(key: str, peak: Peak) -> None:
    assert normalize_device_kind(key) == key
    assert peak.flops_per_second is not None and 1e13 < peak.flops_per_second < 1e16
    assert peak.memory_bytes is not None and 4 * GIB <= peak.memory_bytes <= 256 * GIB
    assert isinstance(peak.memory_bytes, int)
    bandwidth = peak.memory_bytes_per_second
    assert bandwidth is not None and 1e11 < bandwidth < 2e13
    assert "https://" in peak.source
    assert peak.devices_per_chip in (1, 2)
    ridge = ridge_point(peak)
    assert ridge is not None and 30 < ridge < 700


@pytest.mark.parametrize("key", ["tpu v2", "tpu v3", "tpu7x"])
def test_split_chips_are_halved_and_say_so(key: str) -> None:
    peak = DEFAULT_PEAKS[key]
    assert peak.devices_per_chip == 2
    assert "chip/2" in peak.source


@pytest.mark.parametrize(
    ("key", "flops", "memory", "bandwidth"),
    [
        ("tpu v3", 61.5e12, 16 * GIB, 450e9),
        ("tpu v4", 275e12, 32 * GIB, 1200e9),
        ("tpu v5 lite", 197e12, 16 * GIB, 819e9),
        ("tpu v5", 459e12, 95 * GIB, 2765e9),
        ("tpu v6 lite", 918e12, 32 * GIB, 1638e9),
        ("tpu7x", 2307e12 / 2, 96 * GIB, 7380e9 / 2),
        ("nvidia a100-sxm4-80gb", 312e12, 80 * GIB, 2039e9),
        ("nvidia h100 80gb hbm3", 1979e12 / 2, 80 * GIB, 3.35e12),
        ("nvidia h100 pcie", 1513e12 / 2, 80 * GIB, 2e12),
        ("nvidia h200", 1979e12 / 2, 141 * GIB, 4.8e12),
        ("nvidia b200", 2.25e15, 180 * GIB, 8e12),
    ],
)
def test_vendor_numbers(key: str, flops: float, memory: int, bandwidth: float) -> None:
    peak = DEFAULT_PEAKS[key]
    assert peak.flops_per_second == pytest.approx(flops)
    assert peak.memory_bytes == memory
    assert peak.memory_bytes_per_second == pytest.approx(bandwidth)


def test_override_adds_a_new_kind() -> None:
    table = PeakTable({"cpu": {"flops_per_second": 1e11, "memory_bytes_per_second": 2e10}})
    peak = table.lookup("CPU")
    assert peak == Peak(1e11, None, 2e10, "override")
    assert ridge_point(peak) == pytest.approx(5.0)
    assert "cpu" in table.kinds()


def test_override_replaces_fields_of_an_existing_kind_by_any_spelling() -> None:
    table = PeakTable({"v6e": {"memory_bytes_per_second": 1.64e12}})
    peak = table.lookup("TPU v6 lite")
    assert peak is not None
    assert peak.memory_bytes_per_second == 1.64e12
    assert peak.flops_per_second == 918e12  # untouched fields keep the vendor number
    assert peak.memory_bytes == 32 * GIB
    assert peak.source == "override"
    assert PeakTable().lookup("TPU v6 lite") is DEFAULT_PEAKS["tpu v6 lite"]  # no shared state


def test_override_memory_bytes_is_an_int_and_strings_are_numbers() -> None:
    overrides = {"cpu": {"memory_bytes": 6.4e10, "flops_per_second": "2e11"}}  # env var text
    peak = PeakTable(overrides).lookup("cpu")  # type: ignore[arg-type]
    assert peak is not None
    assert peak.memory_bytes == 64_000_000_000 and isinstance(peak.memory_bytes, int)
    assert peak.flops_per_second == 2e11


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cpu": {"flops": 1e11}}, "unknown field 'flops'"),
        ({"cpu": {"flops_per_second": 0}}, "positive finite"),
        ({"cpu": {"flops_per_second": -1.0}}, "positive finite"),
        ({"cpu": {"flops_per_second": math.inf}}, "positive finite"),
        ({"cpu": {"flops_per_second": math.nan}}, "positive finite"),
        ({"cpu": {"flops_per_second": True}}, "positive finite"),
        ({"cpu": {"flops_per_second": "fast"}}, "positive finite"),
        ({"cpu": {"flops_per_second": None}}, "positive finite"),
        ({"cpu": 1e11}, "expected a mapping"),
        ({"": {"flops_per_second": 1e11}}, "non-empty string"),
    ],
)
def test_bad_overrides_raise_value_error(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PeakTable(overrides)


@pytest.mark.parametrize(
    ("peak", "expected"),
    [
        (None, None),
        (Peak(None, None, 1e12, "x"), None),
        (Peak(1e12, None, None, "x"), None),
        (Peak(1e12, None, 0.0, "x"), None),
        (Peak(918e12, None, 1.6e12, "x"), 573.75),
    ],
)
def test_ridge_point(peak: Peak | None, expected: float | None) -> None:
    assert ridge_point(peak) == (None if expected is None else pytest.approx(expected))
