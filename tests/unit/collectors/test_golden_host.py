"""Golden /metrics of fixture TPU hosts, end to end through a real daemon (node_exporter style).

The daemon reads a fixture sysfs/procfs tree and polls fake libtpu metrics servers; its
/metrics is diffed with tests/golden/host_<name>.txt after masking what changes from run to
run (times, durations, versions, the servers' ports). After an intentional change, rerun with
``XMON_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def test_golden_files_name_every_tpu_series() -> None:
    text = (GOLDEN / "host_v6e-8.txt").read_text()
    for family in (
        "xmon_device_memory_used_bytes",
        "xmon_device_duty_cycle_ratio",
        "xmon_device_memory_bandwidth_utilization_ratio",
        "xmon_device_idle_seconds",
        "xmon_device_location_info",
        "xmon_runtime_service_up",
        "xmon_runtime_value",
        "xmon_runtime_increments_total",
        "xmon_runtime_latency_seconds_bucket",
        "xmon_runtime_distribution_bucket",
    ):
        assert f"\n{family}{{" in text, family  # fmt: skip
