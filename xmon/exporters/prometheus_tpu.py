"""The TPU series of a device, and the series of accelerator runtimes' metrics services.

Every metric libtpu's service lists that has no dedicated field lands in one of five generic
families, keyed by ``metric`` (libtpu's name), ``device`` (xmon's device index, empty when the
point names none) and ``attributes`` (the point's other attributes, ``k=v`` joined by commas).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from xmon.model import Device, RuntimeMetric, RuntimeService

if TYPE_CHECKING:
    from .prometheus_builder import FamilyBuilder


def add_tpu_series(b: FamilyBuilder, d: Device, key: tuple[object, ...]) -> None:
    hw = d.hardware
    b.add("xmon_device_memory_bandwidth_utilization_ratio", key,
          hw.memory_bandwidth_utilization_ratio)  # fmt: skip
    b.add("xmon_device_idle_seconds", key, hw.idle_seconds)
    where = (d.chip_index, d.device_path, d.numa_node, d.runtime_address)
    if any(v is not None for v in where):
        b.info("xmon_device_location_info", (*key, *where))


def attributes_label(metric: RuntimeMetric) -> str:
    return ",".join(f"{k}={v}" for k, v in metric.attributes)


def add_runtime_series(b: FamilyBuilder, services: Iterable[RuntimeService]) -> None:
    for service in services:
        where = (service.source, service.address)
        b.add("xmon_runtime_service_up", where, service.up)
        if service.up:
            b.add("xmon_runtime_service_metrics", where, len(service.supported))
        for metric in service.metrics:
            _add_point(b, (*where, metric.name, metric.device, attributes_label(metric)), metric)


def _add_point(b: FamilyBuilder, labels: tuple[object, ...], m: RuntimeMetric) -> None:
    if m.kind == "gauge":
        b.add("xmon_runtime_value", labels, m.value)
    elif m.kind == "counter":
        b.add("xmon_runtime_increments_total", labels, m.value)
    elif m.distribution is None:
        return
    elif m.kind == "distribution":
        name = (
            "xmon_runtime_latency_seconds" if m.unit == "seconds" else "xmon_runtime_distribution"
        )
        d = m.distribution
        b.histogram(name, labels, d.buckets, d.count, d.sum)
    elif m.kind == "summary":
        d = m.distribution
        quantiles = [(format(q, "g"), v) for q, v in d.quantiles]
        b.summary("xmon_runtime_quantiles", labels, quantiles, d.count, d.sum or 0.0)
