"""The nvml collector: absent for real here, and its NVML mapping against a pynvml stand-in.

Without a GPU this machine still has the real nvidia-ml-py, whose nvmlInit fails (no driver):
that path runs for real, in-process and in a real daemon. The mapping from NVML to the model
runs against ``nvml_fake.FakeNvml``, which answers with pynvml's own structs and error classes.
Real-hardware checks are in test_nvml_gpu.py.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest
from prometheus_client.exposition import generate_latest

from xmon.collectors import CollectContext, CollectorOutput, CollectorRunner, registered
from xmon.collectors.nvml import (
    NvmlCollector,
    load_nvml,
    load_pynvml,
)
from xmon.collectors.nvml_device import counter_rate, ratio, sum_known
from xmon.exporters.prometheus import SnapshotCollector
from xmon.model import Snapshot

from support.nvml_fake import MIB, FakeGpu, FakeNvml, h100
from support.nvml_snapshots import fixture_host, fixture_snapshot, tick

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "nvml_metrics.txt"


# --- absent, for real ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "load", [load_nvml, load_pynvml], ids=["library-probe", "real-nvmlInit-fails"]
)
def test_real_pynvml_without_a_driver_is_absent_not_an_error(
    caplog: pytest.LogCaptureFixture, load: Any
) -> None:
    nv = load_pynvml()
    assert nv is not None and nv.__name__ == "pynvml"  # the real nvidia-ml-py
    try:
        nv.nvmlInit()
        nv.nvmlShutdown()
        pytest.skip("NVML works on this machine: the absent path is not testable here")
    except nv.NVMLError:
        pass
    collector = NvmlCollector(load=load)
    with caplog.at_level(logging.DEBUG, logger="xmon"):
        outputs = [collector.collect(CollectContext(monotonic=float(t))) for t in range(3)]
    assert all(o == CollectorOutput(present=False) for o in outputs)
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    tries = [r for r in caplog.records if "not available" in r.getMessage()]
    assert len(tries) == 1  # the next try waits for the retry period
    collector.close()


def test_without_nvidia_ml_py_the_collector_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` meets when missing
    assert load_pynvml() is None
    collector = NvmlCollector(load=load_pynvml)  # as if a driver loaded, but no nvidia-ml-py
    assert collector.collect(CollectContext(monotonic=0.0)) == CollectorOutput(present=False)


def test_nvml_is_loaded_again_after_the_retry_period() -> None:
    nv = FakeNvml([h100(0)])
    loaded: list[FakeNvml | None] = [None, nv]  # no driver yet, then one is installed
    calls: list[float] = []

    def load() -> FakeNvml | None:
        calls.append(1.0)
        return loaded[len(calls) - 1]

    collector = NvmlCollector(retry_seconds=60.0, load=load)
    assert not tick(collector, None, 0.0).present
    assert not tick(collector, None, 30.0).present  # no second try before the retry period
    assert len(calls) == 1
    assert tick(collector, nv, 61.0).present
    assert tick(collector, nv, 62.0).present and len(calls) == 2  # loaded once, then kept
    collector.close()


def test_registered_enabled_by_default_and_absent_in_the_runner() -> None:
    entry = next(e for e in registered() if e.name == "nvml")
    assert entry.default_enabled
    runner = CollectorRunner(["nvml"], timeout=5.0)
    try:
        for _ in range(2):
            output, (health,) = runner.run(CollectContext(monotonic=0.0))
    finally:
        runner.close()
    assert output.devices == ()
    assert (health.name, health.up, health.present, health.errors_total) == ("nvml", True, False, 0)


def test_init_failure_is_absent_and_retried_after_the_retry_period() -> None:
    nv = FakeNvml([h100(0)], init_error=pynvml.NVMLError_DriverNotLoaded)
    collector = NvmlCollector(nv, retry_seconds=60.0)
    assert not tick(collector, nv, 0.0).present
    assert not tick(collector, nv, 30.0).present
    assert nv.calls.count("nvmlInit") == 1  # no attempt inside the retry period
    nv.init_error = None  # the driver got loaded
    assert len(tick(collector, nv, 61.0).devices) == 1
    assert nv.calls.count("nvmlInit") == 2


def test_no_gpu_is_absent_and_nvml_is_shut_down_again() -> None:
    nv = FakeNvml([])
    assert not tick(NvmlCollector(nv), nv, 0.0).present
    assert nv.calls == ["nvmlInit", "nvmlShutdown"]


# --- the mapping ------------------------------------------------------------------------------


def test_one_pass_maps_every_field_with_base_units() -> None:
    nv = fixture_host()
    collector = NvmlCollector(nv)
    first = tick(collector, nv, 0.0).devices[0]
    nv.advance(2.0)
    device = tick(collector, nv, 2.0).devices[0]
    assert (device.index, device.platform, device.device_kind, device.source) == (
        0, "gpu", "NVIDIA H100 80GB HBM3", "nvml")  # fmt: skip
    assert device.uuid == "GPU-4a0b6c2e-91d3-4f7b-8e55-000000000000"
    assert device.pci_bus_id == "00000000:18:00.0"
    hw = device.hardware
    assert (hw.memory_used_bytes, hw.memory_total_bytes, hw.memory_reserved_bytes) == (
        61_440 * MIB, 81_559 * MIB, 539 * MIB)  # fmt: skip
    assert (hw.utilization_ratio, hw.memory_busy_ratio) == (0.98, 0.43)
    assert (hw.power_watts, hw.power_limit_watts, hw.temperature_celsius) == (612.345, 700.0, 64)
    assert hw.energy_joules_total == pytest.approx(9_000 + 2 * 612.345)
    assert (hw.sm_clock_hertz, hw.memory_clock_hertz) == (1.98e9, 2.619e9)
    assert (hw.pcie_tx_bytes_per_second, hw.pcie_rx_bytes_per_second) == (2.5e8, 1.25e9)
    assert hw.nvlink_tx_bytes_per_second == pytest.approx(18 * 2**30)  # 1 GiB/s on 18 links
    assert hw.nvlink_rx_bytes_per_second == pytest.approx(9 * 2**30)
    assert (hw.sm_active_ratio, hw.sm_occupancy_ratio) == (0.815, 0.22)
    assert (hw.tensor_active_ratio, hw.dram_active_ratio) == (0.4625, 0.58)
    assert (hw.ecc_corrected_errors_total, hw.ecc_uncorrected_errors_total) == (3, 0)
    assert hw.ecc_corrected_errors_aggregate_total == 12
    assert (hw.xid_errors_total, hw.last_xid) == (0, None)
    assert device.pids == (4242,)
    assert [(p.pid, p.memory_used_bytes) for p in device.processes] == [(4242, 61_000 * MIB)]
    # rates and GPM need two readings: absent (not 0) on the first tick
    h1 = first.hardware
    assert h1.pcie_tx_bytes_per_second is None and h1.nvlink_rx_bytes_per_second is None
    assert h1.sm_active_ratio is None and h1.utilization_ratio == 0.98


def test_unsupported_fields_are_none_and_quiet(caplog: pytest.LogCaptureFixture) -> None:
    """A GeForce-like GPU: no ECC, no GPM, no NVLink, no energy or power counters."""
    unsupported = pynvml.NVMLError_NotSupported
    gpu = FakeGpu(name="NVIDIA GeForce RTX 4090", gpm=None, xid_events=False, failing={
        f: unsupported for f in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
                                 "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetUtilizationRates")
    })  # fmt: skip
    nv = FakeNvml([gpu])
    collector = NvmlCollector(nv)
    with caplog.at_level(logging.WARNING, logger="xmon"):
        for t in range(3):
            device = tick(collector, nv, float(t)).devices[0]
    hw = device.hardware
    for name in ("power_watts", "power_limit_watts", "energy_joules_total", "utilization_ratio",
                 "memory_busy_ratio", "sm_active_ratio", "nvlink_tx_bytes_per_second",
                 "ecc_corrected_errors_total", "xid_errors_total"):  # fmt: skip
        assert getattr(hw, name) is None, name
    assert hw.memory_used_bytes == 0 and hw.pcie_tx_bytes_per_second == 0.0
    assert caplog.records == []


def test_an_older_gpu_uses_the_v1_memory_call_and_the_pcie_sampler() -> None:
    """No nvmlDeviceGetMemoryInfo_v2 (driver < 510) and no PCIe byte counter fields."""
    gpu = FakeGpu(name="Tesla V100-SXM2-16GB", total=16_384 * MIB, reserved=300 * MIB,
                  used=1000 * MIB, pcie_counters=False, pcie_throughput_kb=(1500, 30_000),
                  failing={"nvmlDeviceGetMemoryInfo_v2": pynvml.NVMLError_FunctionNotFound,
                           "nvmlDeviceGetTemperatureV": pynvml.NVMLError_FunctionNotFound},
                  )  # fmt: skip
    nv = FakeNvml([gpu])
    hw = tick(NvmlCollector(nv), nv, 0.0).devices[0].hardware
    assert hw.memory_used_bytes == 1300 * MIB  # v1's used includes the reserved part
    assert hw.memory_reserved_bytes is None
    assert hw.temperature_celsius == 31  # through the older nvmlDeviceGetTemperature
    assert (hw.pcie_tx_bytes_per_second, hw.pcie_rx_bytes_per_second) == (
        1500 * 1024,
        30_000 * 1024,
    )


def test_a_gpu_failing_mid_read_keeps_its_row_and_spares_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nv = fixture_host()
    collector = NvmlCollector(nv)
    tick(collector, nv, 0.0)
    with caplog.at_level(logging.INFO, logger="xmon"):
        nv.gpus[1].failing["nvmlDeviceGetPowerUsage"] = pynvml.NVMLError_GpuIsLost
        nv.gpus[1].failing["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVMLError_GpuIsLost
        for t in (1.0, 2.0, 3.0):
            nv.advance(1.0)
            gpu0, gpu1 = tick(collector, nv, t).devices
        assert gpu1.hardware.power_watts is None and gpu1.processes == ()
        assert gpu1.hardware.memory_total_bytes == 81_559 * MIB  # read before the failure
        assert gpu0.hardware.power_watts == 612.345 and gpu0.pids == (4242,)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [
            "nvml: GPU 1: nvmlDeviceGetPowerUsage: GPU is lost; "
            "nvmlDeviceGetComputeRunningProcesses: GPU is lost"
        ]  # once
        nv.gpus[1].failing.clear()
        assert tick(collector, nv, 4.0).devices[1].hardware.power_watts == 69.0
    assert caplog.records[-1].getMessage() == "nvml: GPU 1: reads recovered"


def test_a_gpu_lost_at_every_call_is_listed_with_what_nvml_knew() -> None:
    nv = fixture_host()
    collector = NvmlCollector(nv)
    tick(collector, nv, 0.0)
    nv.gpus[0].failing["*"] = pynvml.NVMLError_GpuIsLost
    device = tick(collector, nv, 1.0).devices[0]
    assert device.device_kind == "NVIDIA H100 80GB HBM3" and device.uuid is not None
    counters = vars(device.hardware)
    assert counters.pop("xid_errors_total") == 0  # from the event set, which still answers
    assert all(v is None for v in counters.values())


def test_a_gpu_nvml_cannot_open_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    nv = fixture_host()
    nv.gpus[0].failing["nvmlDeviceGetHandleByIndex"] = pynvml.NVMLError_NoPermission
    with caplog.at_level(logging.WARNING, logger="xmon"):
        devices = tick(NvmlCollector(nv), nv, 0.0).devices
    assert [d.index for d in devices] == [1]
    assert caplog.records[0].getMessage() == "nvml: GPU 0 left out: Insufficient Permissions"


def test_xid_events_are_counted_per_gpu() -> None:
    nv = fixture_host()
    nv.gpus[0].xid_events = False  # registration refused: unknown, not 0
    collector = NvmlCollector(nv)
    tick(collector, nv, 0.0)
    for code in (13, 79):
        nv.xid(1, code)
    gpu0, gpu1 = tick(collector, nv, 1.0).devices
    assert (gpu0.hardware.xid_errors_total, gpu0.hardware.last_xid) == (None, None)
    assert (gpu1.hardware.xid_errors_total, gpu1.hardware.last_xid) == (2, 79)
    assert tick(collector, nv, 2.0).devices[1].hardware.xid_errors_total == 2


def test_processes_with_several_contexts_are_summed() -> None:
    gpu = h100(0, processes=[(10, 100 * MIB), (11, None), (10, 50 * MIB)])
    nv = FakeNvml([gpu])
    device = tick(NvmlCollector(nv), nv, 0.0).devices[0]
    assert device.pids == (10, 11)
    assert [(p.pid, p.memory_used_bytes) for p in device.processes] == [(10, 150 * MIB), (11, None)]


def test_close_frees_gpm_samples_and_events_and_shuts_nvml_down() -> None:
    nv = fixture_host()
    collector = NvmlCollector(nv)
    tick(collector, nv, 0.0)
    assert len(nv.samples) == 4 and len(nv.event_sets) == 1
    collector.close()
    assert nv.samples == {} and nv.event_sets == [] and nv.calls[-1] == "nvmlShutdown"
    collector.close()  # twice is harmless
    assert nv.calls.count("nvmlShutdown") == 1


@pytest.mark.parametrize(
    ("previous", "current", "scale", "expected"),
    [
        (None, (10.0, 1.0), 1.0, None),  # first reading
        ((10.0, 1.0), (30.0, 3.0), 1.0, 10.0),
        ((10.0, 1.0), (30.0, 3.0), 1024.0, 10240.0),  # KiB counters
        ((10.0, 1.0), (5.0, 2.0), 1.0, None),  # wrapped or reset
        ((10.0, 1.0), (10.0, 1.0), 1.0, None),  # no time passed
    ],
)
def test_counter_rate(
    previous: tuple[float, float] | None, current: tuple[float, float], scale: float,
    expected: float | None,
) -> None:  # fmt: skip
    assert counter_rate(previous, current, scale) == expected


def test_ratio_and_sum_known() -> None:
    assert [ratio(v) for v in (None, 0, 50, 100, 101, float("nan"))] == [
        None, 0.0, 0.5, 1.0, 1.0, None]  # fmt: skip
    assert (sum_known([None, None]), sum_known([None, 2.0, 3.0])) == (None, 5.0)


# --- exposition of a fixture host -------------------------------------------------------------


def exposition(snapshot: Snapshot) -> str:
    text = generate_latest(SnapshotCollector(50, snapshot)).decode()
    return re.sub(r'python_version="[^"]*"', 'python_version="X"', text)


def test_golden_exposition_of_a_gpu_host() -> None:
    """Diffed end to end; XMON_UPDATE_GOLDEN=1 rewrites the file after an intended change."""
    text = exposition(fixture_snapshot())
    if os.environ.get("XMON_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed: rerun with XMON_UPDATE_GOLDEN=1"


def test_nvml_and_pjrt_memory_of_a_job_side_by_side() -> None:
    lines = exposition(fixture_snapshot()).splitlines()
    nvml = [x for x in lines if x.startswith("xmon_device_process_memory_used_bytes{")]
    pjrt = [x for x in lines if x.startswith("xmon_job_device_memory_in_use_bytes{")]
    assert nvml == [
        'xmon_device_process_memory_used_bytes{device="0",device_kind="NVIDIA H100 '
        '80GB HBM3",job_name="train",pid="4242",platform="gpu"} 6.3963136e+10'
    ]
    assert pjrt == [
        'xmon_job_device_memory_in_use_bytes{device="0",device_kind="NVIDIA H100 '
        '80GB HBM3",job_name="train",pid="4242",platform="gpu"} 3.221225472e+09'
    ]
