"""GPU Performance Monitoring (GPM, Hopper and later): SM activity, occupancy, tensor and DRAM use.

NVML's ``utilization.gpu`` only says that *some* kernel ran during the sample period (a single
busy SM counts as 100 %). GPM counts what the SMs did, like DCGM's profiling fields
(DCGM_FI_PROF_SM_ACTIVE, SM_OCCUPANCY, PIPE_TENSOR_ACTIVE, DRAM_ACTIVE), without DCGM. NVML
computes each metric from two samples; the sampler keeps two and swaps them every tick, so a
value covers the time since the previous tick.
"""

from __future__ import annotations

import math
from typing import Any

from xmon.collectors.nvml_calls import NvmlPass

# HardwareCounters field -> pynvml constant name of the GPM metric (percent, 0-100)
GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("sm_active_ratio", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy_ratio", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("tensor_active_ratio", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("dram_active_ratio", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)


def empty() -> dict[str, float | None]:
    return {name: None for name, _ in GPM_METRICS}


class GpmSampler:
    """Two GPM samples of one device. Not thread-safe; the collector calls it from one thread."""

    def __init__(self, nv: Any, handle: Any, old: Any, new: Any) -> None:
        self._nv, self._handle = nv, handle
        self._old, self._new = old, new
        self._primed = False  # the old sample holds a reading

    @classmethod
    def start(cls, p: NvmlPass, handle: Any) -> GpmSampler | None:
        """A sampler for the device, or None where it has no GPM."""
        support = p.get("nvmlGpmQueryDeviceSupport", handle)
        if support is None or not support.isSupportedDevice:
            return None
        old = p.get("nvmlGpmSampleAlloc")
        new = p.get("nvmlGpmSampleAlloc")
        sampler = cls(p.nv, handle, old, new)
        if old is None or new is None:
            sampler.close()
            return None
        return sampler

    def read(self, p: NvmlPass) -> dict[str, float | None]:
        """The GPM ratios since the last read; all None on the first read and on failure."""
        if not self._primed:  # the first tick only takes the sample the second one ends
            self._primed = p.get("nvmlGpmSampleGet", self._handle, self._old) is not None
            return empty()
        if p.get("nvmlGpmSampleGet", self._handle, self._new) is None:
            return empty()  # the old sample stays, so the next read spans both periods
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = self._old, self._new
        for i, (_, constant) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = getattr(nv, constant)
        self._old, self._new = self._new, self._old
        if p.get("nvmlGpmMetricsGet", request) is None:
            return empty()
        values = empty()
        for i, (name, _) in enumerate(GPM_METRICS):
            metric = request.metrics[i]
            if metric.nvmlReturn == nv.NVML_SUCCESS and math.isfinite(metric.value):
                values[name] = min(1.0, max(0.0, metric.value / 100.0))
        return values

    def close(self) -> None:
        for sample in (self._old, self._new):
            if sample is not None:
                try:
                    self._nv.nvmlGpmSampleFree(sample)
                except Exception:  # freeing at shutdown: nothing useful to do on failure
                    pass
        self._old = self._new = None
