"""Decode libtpu runtime metrics (``tpu.monitoring.runtime`` protos) into xmon's model.

Pure functions of the protobuf messages, so every shape libtpu may send is table-tested:
per-device gauges keyed by an ``int_attr`` ("device-id"), HLO metrics keyed by a
``kvlist_attr`` with ``device_ordinal`` (a string of digits in newer libtpu, an int in older),
megascale distributions keyed by kvlists such as ``buffer_size`` / ``type``.

Distributions follow the Cloud Monitoring convention: with N finite buckets there are N + 2
buckets, bucket 0 the underflow and bucket N + 1 the overflow; bucket i's upper bound is
``scale * growth_factor**i`` (exponential), ``offset + width * i`` (linear) or ``bounds[i]``
(explicit). Trailing empty buckets may be left out of ``bucket_counts``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from xmon.model import Distribution, RuntimeMetric

QUANTILES = (0.5, 0.9, 0.95, 0.999)  # the percentiles tpu-info prints
DEVICE_KEYS = frozenset({"device_ordinal", "device-id", "device_id"})
_TIME_UNITS = ((r"microseconds?", 1e-6), (r"milliseconds?", 1e-3), (r"seconds?", 1.0))


# --- attributes ------------------------------------------------------------------------------


def attr_text(value: Any) -> str:
    """An ``AttrValue`` as label text."""
    kind = value.WhichOneof("attr")
    if kind is None:
        return ""
    raw = getattr(value, kind)
    if kind == "bool_attr":
        return "true" if raw else "false"
    if kind == "double_attr":
        return format(raw, "g")
    if kind == "bytes_attr":
        return bytes(raw).hex()
    if kind == "array_attr":
        return ",".join(attr_text(v) for v in raw.attrs)
    if kind == "kvlist_attr":
        return ";".join(f"{a.key}={attr_text(a.value)}" for a in raw.attributes)
    return str(raw)  # string_attr, int_attr


def split_attribute(attribute: Any) -> tuple[int | None, tuple[tuple[str, str], ...]]:
    """(runtime device id or None, the remaining attributes sorted by key) of one point.

    A bare ``int_attr`` is the device id (what tpu-info reads for ``tpu.runtime.*`` metrics,
    whatever the key); inside a kvlist, a device key whose value is an integer is.
    """
    kind = attribute.value.WhichOneof("attr")
    if kind is None:
        return None, ()
    if kind == "int_attr":
        return int(attribute.value.int_attr), ()
    if kind != "kvlist_attr":
        return None, ((attribute.key or "attribute", attr_text(attribute.value)),)
    device, rest = None, []
    for item in attribute.value.kvlist_attr.attributes:
        text = attr_text(item.value)
        if item.key in DEVICE_KEYS and re.fullmatch(r"-?\d+", text):
            device = int(text)
        else:
            rest.append((item.key, text))
    return device, tuple(sorted(rest))


# --- distributions ---------------------------------------------------------------------------


def time_scale(metric_name: str) -> float | None:
    """Factor to seconds when the metric's name carries a time unit, else None."""
    parts = metric_name.lower().split(".")
    for pattern, factor in _TIME_UNITS:
        if any(re.fullmatch(pattern, part) for part in parts):
            return factor
    return None


def upper_bounds(options: Any, n_buckets: int) -> list[float]:
    """Finite upper bounds of buckets 0..n-1 (``n_buckets`` = finite + underflow)."""
    kind = options.WhichOneof("options")
    if kind == "exponential_buckets":
        e = options.exponential_buckets
        return [e.scale * e.growth_factor**i for i in range(n_buckets)]
    if kind == "linear_buckets":
        lin = options.linear_buckets
        return [lin.offset + lin.width * i for i in range(n_buckets)]
    if kind == "explicit_buckets":
        return list(options.explicit_buckets.bounds)
    return []  # none given, or the deprecated "regular" buckets: count and sum only


def _finite_buckets(options: Any) -> int:
    kind = options.WhichOneof("options")
    if kind == "explicit_buckets":
        return max(0, len(options.explicit_buckets.bounds) - 1)
    if kind in ("exponential_buckets", "linear_buckets"):
        return max(0, getattr(options, kind).num_finite_buckets)
    return 0


def cumulative_buckets(
    bounds: Sequence[float], counts: Sequence[int]
) -> tuple[tuple[float, int], ...]:
    """(upper bound, cumulative count) for every finite bound; counts past them go to +Inf."""
    out, running = [], 0
    for i, bound in enumerate(bounds):
        running += counts[i] if i < len(counts) else 0
        out.append((bound, running))
    return tuple(out)


def quantile(
    buckets: Sequence[tuple[float, int]], count: int, q: float, low: float, high: float | None
) -> float | None:
    """The q-quantile, interpolated linearly inside its bucket; None when empty.

    Same rank and interpolation as tpu-info (``_get_percentile``): the sample of rank
    ``floor(q * count)`` counted from 0, so both print the same numbers. ``low`` bounds the
    underflow bucket from below (the minimum seen); past the last finite bound the answer is
    ``high``, the maximum seen.
    """
    if count <= 0:
        return None
    rank, below, lower = math.floor(q * count), 0, low
    for bound, cumulative in buckets:
        if cumulative > rank:
            share = (rank - below) / (cumulative - below)
            return lower + (max(bound, lower) - lower) * share
        below, lower = cumulative, bound
    return high if high is not None else lower


def decode_distribution(dist: Any, scale: float = 1.0) -> Distribution:
    """A ``Distribution`` message, values multiplied by ``scale`` (e.g. microseconds -> s)."""
    options = dist.bucket_options
    n = _finite_buckets(options) + 1  # finite buckets plus the underflow bucket
    bounds = [b * scale for b in upper_bounds(options, n)]
    buckets = cumulative_buckets(bounds, list(dist.bucket_counts))
    count = max(int(dist.count), buckets[-1][1] if buckets else 0)
    seen = count > 0
    low, high = (dist.min * scale, dist.max * scale) if seen else (0.0, None)
    values = [(q, quantile(buckets, count, q, low, high)) for q in QUANTILES] if buckets else []
    return Distribution(
        count=count,
        sum=dist.mean * count * scale if seen else 0.0,
        min=low if seen else None,
        max=high,
        buckets=buckets,
        quantiles=tuple((q, v) for q, v in values if v is not None),
    )


def decode_summary(summary: Any) -> Distribution:
    return Distribution(
        count=int(summary.sample_count),
        sum=float(summary.sample_sum),
        quantiles=tuple((float(q.quantile), float(q.value)) for q in summary.quantile),
    )


# --- points ----------------------------------------------------------------------------------


def _number(message: Any) -> tuple[float | None, str | None]:
    """(numeric value, text value) of a Gauge or Counter's ``value`` oneof."""
    kind = message.WhichOneof("value")
    if kind is None:
        return None, None
    raw = getattr(message, kind)
    return (None, str(raw)) if kind == "as_string" else (float(raw), None)


def decode_point(name: str, point: Any) -> RuntimeMetric | None:
    """One ``Metric`` data point; None for an empty one. ``device`` is the runtime's id."""
    device, attributes = split_attribute(point.attribute)
    kind = point.WhichOneof("measure")
    if kind in ("gauge", "counter"):  # most points: built directly, no intermediate copy
        value, text = _number(getattr(point, kind))
        if text is not None:  # a string gauge: keep the text as a label, value 1 like *_info
            return RuntimeMetric(name, kind, "", device, (*attributes, ("value", text)), 1.0)
        return None if value is None else RuntimeMetric(name, kind, "", device, attributes, value)
    base = RuntimeMetric(name=name, kind=kind or "", device=device, attributes=attributes)
    if kind == "distribution":
        scale = time_scale(name)
        unit = "seconds" if scale is not None else ""
        dist = decode_distribution(point.distribution, scale or 1.0)
        return replace(base, unit=unit, distribution=dist)
    if kind == "summary":
        return replace(base, distribution=decode_summary(point.summary))
    return None


def decode_metric(metric: Any) -> list[RuntimeMetric]:
    """Every data point of a ``TPUMetric`` (one GetRuntimeMetric answer)."""
    name = metric.name
    points = (decode_point(name, point) for point in metric.metrics)
    return [p for p in points if p is not None]
