"""The one way series are added to /metrics: a builder of Prometheus metric families that accepts
only names in the :mod:`xmon.exporters.metrics_table` table, each series once, and leaves
unknown values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.utils import floatToGoString

from xmon.exporters.metrics_table import LABEL_VALUE_MAX, METRICS, SPEC_BY_NAME, MetricSpec

Number = int | float
JobKey = tuple[str, int]  # (job_name, pid): the labels every job series starts with


def label(value: object) -> str:
    """A label value: text, cut so a client cannot blow up series size."""
    return ("" if value is None else str(value))[:LABEL_VALUE_MAX]


def new_family(spec: MetricSpec) -> Metric:
    labels = list(spec.labels)
    if spec.type == "counter":  # the family re-adds _total on exposition
        return CounterMetricFamily(spec.name, spec.help, labels=labels)
    if spec.type == "info":  # the family adds _info itself
        return InfoMetricFamily(spec.name.removesuffix("_info"), spec.help, labels=labels)
    if spec.type == "summary":
        return SummaryMetricFamily(spec.name, spec.help, labels=labels)
    if spec.type == "histogram":
        return HistogramMetricFamily(spec.name, spec.help, labels=labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=labels)


class FamilyBuilder:
    """Collects samples per metric name; only names in the METRICS table are accepted."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}
        self._seen: set[tuple[str, tuple[str, ...]]] = set()

    def _claim(self, name: str, labels: Sequence[object]) -> tuple[Metric, list[str]] | None:
        spec = SPEC_BY_NAME[name]  # KeyError: a name that is not in the table
        values = [label(v) for v in labels]
        assert len(values) == len(spec.labels), (name, values)
        key = (name, tuple(values))
        if key in self._seen:  # a duplicate series would make Prometheus reject the scrape
            return None
        self._seen.add(key)
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = new_family(spec)
        return family, values

    def add(self, name: str, labels: Sequence[object], value: Number | bool | None) -> None:
        if value is None:
            return
        claimed = self._claim(name, labels)
        if claimed is not None:
            claimed[0].add_metric(claimed[1], float(value))  # type: ignore[attr-defined]

    def info(self, name: str, labels: Sequence[object]) -> None:
        claimed = self._claim(name, labels)
        if claimed is not None:
            claimed[0].add_metric(claimed[1], {})  # type: ignore[attr-defined]

    def summary(
        self,
        name: str,
        labels: Sequence[object],
        quantiles: Iterable[tuple[str, float | None]],
        count: int | None,
        total: float,
    ) -> None:
        """``count`` None: what is summarised is not counted (inferred steps): the quantiles
        alone, with no ``_count`` or ``_sum`` (a 0 would be a wrong number)."""
        claimed = self._claim(name, labels)
        if claimed is None:
            return
        family, values = claimed
        base = dict(zip(SPEC_BY_NAME[name].labels, values, strict=True))
        for quantile, value in quantiles:
            if value is not None:
                family.add_sample(family.name, {**base, "quantile": quantile}, float(value))
        if count is not None:
            family.add_metric(values, count, float(total))  # type: ignore[attr-defined]

    def histogram(
        self,
        name: str,
        labels: Sequence[object],
        buckets: Iterable[tuple[float, int]],
        count: int,
        total: float | None,
    ) -> None:
        """``buckets``: (finite upper bound, cumulative count); the +Inf bucket is ``count``."""
        claimed = self._claim(name, labels)
        if claimed is None:
            return
        family, values = claimed
        pairs = [(floatToGoString(bound), n) for bound, n in buckets]
        pairs.append(("+Inf", count))
        family.add_metric(values, pairs, total)  # type: ignore[attr-defined]

    def families(self) -> list[Metric]:
        """In table order, so the exposition is stable from scrape to scrape."""
        return [self._families[s.name] for s in METRICS if s.name in self._families]
