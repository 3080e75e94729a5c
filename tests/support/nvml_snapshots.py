"""A fake NVML host of busy H100s and the snapshot and exposition the nvml collector makes
of it (its tests in every tier)."""

from __future__ import annotations

from typing import Any

import pynvml

from xmon.collectors import CollectContext, CollectorOutput
from xmon.collectors.nvml import NvmlCollector
from xmon.model import (
    CollectorHealth,
    DaemonStats,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Snapshot,
)

from support.nvml_fake import MIB, FakeGpu, FakeNvml, h100

GIB = 2**30


def tick(collector: NvmlCollector, nv: FakeNvml | None, t: float) -> CollectorOutput:
    if nv is not None:
        nv.clock_us = 1_700_000_000_000_000 + int(t * 1e6)
    return collector.collect(CollectContext(monotonic=t))


def busy_h100(**overrides: Any) -> FakeGpu:
    """GPU 0 of the fixture host: a JAX job with the default 75 % preallocation, training."""
    values: dict[str, Any] = dict(
        used=61_440 * MIB, util_gpu=98, util_memory=43, power_mw=612_345, energy_mj=9_000_000,
        temperature_c=64, sm_mhz=1980, mem_mhz=2619, pcie_tx_rate=2.5e8, pcie_rx_rate=1.25e9,
        nvlink_kib_rate=(1024.0 * 1024,) * 18,
        ecc={(0, 0): 3, (1, 0): 0, (0, 1): 12, (1, 1): 0},
        processes=[(4242, 61_000 * MIB)],
        gpm={pynvml.NVML_GPM_METRIC_SM_UTIL: 81.5, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 22.0,
             pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 46.25,
             pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 58.0},
    )  # fmt: skip
    values.update(overrides)
    return h100(0, **values)


def fixture_host() -> FakeNvml:
    """Two SXM H100s: GPU 0 busy, GPU 1 idle."""
    return FakeNvml([busy_h100(), h100(1, ecc={(0, 0): 0, (1, 0): 0, (0, 1): 0, (1, 1): 0})])


# --- exposition of a fixture host -------------------------------------------------------------


def fixture_snapshot() -> Snapshot:
    """The fixture host after two ticks, with job "train" (pid 4242) attached on GPU 0."""
    nv = fixture_host()
    nv.xid(1, 79)
    collector = NvmlCollector(nv)
    tick(collector, nv, 0.0)
    nv.advance(1.0)
    output = tick(collector, nv, 1.0)
    collector.close()
    pjrt = DeviceMemory(bytes_in_use=3 * GIB, peak_bytes_in_use=5 * GIB, bytes_limit=61_000 * MIB)
    info = DeviceInfo(0, "gpu", "NVIDIA H100 80GB HBM3", local_hardware_id=0)
    job = Job(
        job_name="train",
        pid=4242,
        hostname="gpu-node",
        platform="gpu",
        jax_version="0.10.2",
        jaxlib_version="0.10.2",
        devices=(JobDevice(info, pjrt),),
    )
    return Snapshot(seq=2, wall_time=1_700_000_001.0, monotonic=1.0, hostname="gpu-node",
                    daemon=DaemonStats("0.1.0", 1_700_000_000.0), devices=output.devices,
                    jobs=(job,), collectors=(CollectorHealth("nvml", True, 0, 0.004),))  # fmt: skip
