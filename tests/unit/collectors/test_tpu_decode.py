"""Decoding libtpu runtime metrics: attributes, distributions, percentiles (table-driven).

Messages are built with tpu-info's generated stubs (the proto libtpu serves); percentiles are
checked against tpu-info's own ``_get_percentile`` on the same buckets.
"""

from __future__ import annotations

import math

import pytest
from tpu_info import metrics as tpu_info_metrics
from tpu_info.proto import tpu_metric_service_pb2 as pb

from xmon.collectors.tpu_decode import (
    attr_text,
    cumulative_buckets,
    decode_distribution,
    decode_metric,
    decode_point,
    quantile,
    split_attribute,
    time_scale,
)
from xmon.model import Distribution

from support.fakes.libtpu_server import distribution, spread

Kind = pb.Distribution.BucketOptions


def kv(**pairs: object) -> pb.Attribute:
    items = []
    for key, value in pairs.items():
        v = (
            pb.AttrValue(int_attr=value)
            if isinstance(value, int)
            else pb.AttrValue(string_attr=value)
        )
        items.append(pb.Attribute(key=key, value=v))
    return pb.Attribute(key="k", value=pb.AttrValue(kvlist_attr=pb.KeyValueList(attributes=items)))


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        (pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=3)), (3, ())),
        (pb.Attribute(), (None, ())),
        (kv(device_ordinal="2", core_type="tensorcore"), (2, (("core_type", "tensorcore"),))),
        (kv(device_ordinal=5), (5, ())),  # older libtpu: an int
        (kv(device_ordinal="tensorcore_0"), (None, (("device_ordinal", "tensorcore_0"),))),
        (kv(type="grpc", buffer_size="8MB+"), (None, (("buffer_size", "8MB+"), ("type", "grpc")))),
        (pb.Attribute(key="chip", value=pb.AttrValue(string_attr="a")), (None, (("chip", "a"),))),
        (pb.Attribute(value=pb.AttrValue(bool_attr=True)), (None, (("attribute", "true"),))),
    ],
)
def test_split_attribute(attribute: pb.Attribute, expected: tuple[object, object]) -> None:
    assert split_attribute(attribute) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (pb.AttrValue(double_attr=1.5), "1.5"),
        (pb.AttrValue(bytes_attr=b"\x01\xff"), "01ff"),
        (pb.AttrValue(bool_attr=False), "false"),
        (pb.AttrValue(array_attr=pb.ArrayAttrValue(attrs=[pb.AttrValue(int_attr=1),
                                                         pb.AttrValue(string_attr="x")])), "1,x"),
        (pb.AttrValue(), ""),
    ],
)  # fmt: skip
def test_attr_text(value: pb.AttrValue, text: str) -> None:
    assert attr_text(value) == text


@pytest.mark.parametrize(
    ("name", "scale"),
    [
        ("megascale.dcn_transfer_latencies.microsecond.cumulative.distribution", 1e-6),
        ("hlo.execution.timing.distribution.microseconds", 1e-6),
        ("some.latency.milliseconds", 1e-3),
        ("tpu.runtime.uptime.seconds.gauge", 1.0),
        ("megascale.grpc_tcp_delivery_rate.Mbps.cumulative.distribution", None),
        ("megascale.dcn_transfer_size.bytes.cumulative.distribution", None),
    ],
)
def test_time_scale(name: str, scale: float | None) -> None:
    assert time_scale(name) == scale


def test_cumulative_buckets_fill_omitted_trailing_buckets() -> None:
    assert cumulative_buckets([1, 2, 4, 8], [1, 2]) == ((1, 1), (2, 3), (4, 3), (8, 3))
    assert cumulative_buckets([1, 2], [1, 2, 3, 4]) == ((1, 1), (2, 3))  # rest: +Inf


def test_exponential_distribution() -> None:
    # As in Google's device plugin tests: 3 finite buckets, scale 1, growth 2 -> bounds 1,2,4,8.
    options = Kind(exponential_buckets=Kind.Exponential(num_finite_buckets=3, growth_factor=2,
                                                        scale=1))  # fmt: skip
    msg = pb.Distribution(count=15, mean=5, min=0.5, max=10, bucket_options=options,
                          bucket_counts=[1, 2, 3, 4, 5])  # fmt: skip
    d = decode_distribution(msg)
    assert d.buckets == ((1, 1), (2, 3), (4, 6), (8, 10))
    assert (d.count, d.sum, d.min, d.max) == (15, 75, 0.5, 10)


def test_linear_and_explicit_buckets() -> None:
    linear = Kind(linear_buckets=Kind.Linear(num_finite_buckets=2, width=10, offset=5))
    d = decode_distribution(pb.Distribution(count=3, mean=1, bucket_options=linear,
                                            bucket_counts=[0, 1, 2]))  # fmt: skip
    assert d.buckets == ((5, 0), (15, 1), (25, 3))
    explicit = Kind(explicit_buckets=Kind.Explicit(bounds=[1, 10, 100]))
    d = decode_distribution(pb.Distribution(count=4, mean=1, bucket_options=explicit,
                                            bucket_counts=[1, 1, 1, 1]))  # fmt: skip
    assert d.buckets == ((1, 1), (10, 2), (100, 3)) and d.count == 4


def test_no_bucket_options_keeps_count_and_sum() -> None:
    d = decode_distribution(pb.Distribution(count=4, mean=2.5))
    assert d == Distribution(count=4, sum=10.0, min=0.0, max=0.0)


def test_empty_distribution_has_no_quantiles() -> None:
    d = decode_distribution(distribution([]))
    assert d.count == 0 and d.quantiles == () and d.min is None and d.max is None


def test_microseconds_scale_to_seconds() -> None:
    d = decode_distribution(distribution(spread(2400.0)), 1e-6)
    assert d.count == 43
    assert d.sum == pytest.approx(sum(spread(2400.0)) * 1e-6)
    assert d.buckets[0] == (1e-6, 0) and d.buckets[12][0] == pytest.approx(4096e-6)
    assert all(0.0014 < v < 0.0073 for _, v in d.quantiles)


@pytest.mark.parametrize("center", [3.0, 180.0, 950.0, 2400.0, 9000.0])
def test_quantiles_match_tpu_info(center: float) -> None:
    msg = distribution(spread(center))
    d = decode_distribution(msg)
    counts, e = list(msg.bucket_counts), msg.bucket_options.exponential_buckets
    assert [q for q, _ in d.quantiles] == [0.5, 0.9, 0.95, 0.999]
    for q, value in d.quantiles:
        theirs = tpu_info_metrics._get_percentile(  # noqa: SLF001 - the reference implementation
            int(msg.count * q), msg.count, counts, e.scale, e.growth_factor
        )
        assert value == pytest.approx(theirs), q


def test_quantile_edges() -> None:
    buckets = ((1.0, 0), (2.0, 4), (4.0, 4))
    assert quantile(buckets, 4, 0.5, 0.0, 3.0) == pytest.approx(1.5)
    assert quantile(buckets, 6, 0.99, 0.0, 9.0) == 9.0  # in the overflow bucket: the max
    assert quantile(buckets, 0, 0.5, 0.0, None) is None
    assert quantile(((1.0, 2),), 2, 0.5, 0.25, None) == pytest.approx(0.625)  # underflow


def gauge_point(**gauge: object) -> pb.Metric:
    return pb.Metric(
        attribute=pb.Attribute(value=pb.AttrValue(int_attr=1)), gauge=pb.Gauge(**gauge)
    )


@pytest.mark.parametrize(
    ("point", "value", "attributes"),
    [
        (gauge_point(as_int=7), 7.0, ()),
        (gauge_point(as_double=0.25), 0.25, ()),
        (gauge_point(as_bool=True), 1.0, ()),
        (gauge_point(as_string="ok"), 1.0, (("value", "ok"),)),
    ],
)
def test_gauges(point: pb.Metric, value: float, attributes: tuple[object, ...]) -> None:
    m = decode_point("g", point)
    assert m is not None and (m.kind, m.device, m.value, m.attributes) == (
        "gauge", 1, value, attributes)  # fmt: skip


def test_counter_summary_and_empty_points() -> None:
    counter = decode_point("c", pb.Metric(counter=pb.Counter(as_int=2**40)))
    assert counter is not None and (counter.kind, counter.value) == ("counter", 2.0**40)
    summary = pb.Summary(sample_count=3, sample_sum=1.5,
                         quantile=[pb.Quantile(quantile=0.5, value=0.4)])  # fmt: skip
    s = decode_point("s.microseconds", pb.Metric(summary=summary))
    assert s is not None and s.distribution == Distribution(3, 1.5, quantiles=((0.5, 0.4),))
    assert s.unit == ""  # summaries are kept as served
    assert decode_point("x", pb.Metric()) is None
    assert decode_point("x", pb.Metric(gauge=pb.Gauge())) is None


def test_decode_metric_keeps_every_point() -> None:
    metric = pb.TPUMetric(name="hlo.execution.timing.distribution.microseconds", metrics=[
        pb.Metric(attribute=kv(device_ordinal=str(i)), distribution=distribution(spread(100.0)))
        for i in range(3)])  # fmt: skip
    points = decode_metric(metric)
    assert [p.device for p in points] == [0, 1, 2]
    assert all(p.unit == "seconds" and p.distribution is not None for p in points)
    assert math.isclose(points[0].distribution.sum or 0, sum(spread(100.0)) * 1e-6)  # type: ignore[union-attr]
