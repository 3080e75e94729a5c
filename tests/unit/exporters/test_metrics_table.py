"""The metric table follows Prometheus naming rules; docs/metrics.md is generated from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xmon.exporters.metrics_table import METRICS, SPEC_BY_NAME, MetricSpec, render_markdown

DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
RESERVED_LABELS = {"le", "quantile", "instance", "job", "type", "host"}
UNIT_SUFFIX = {"bytes": "_bytes", "seconds": "_seconds", "ratio": "_ratio"}


def test_names_are_unique() -> None:
    assert len(SPEC_BY_NAME) == len(METRICS)


@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_name_follows_conventions(spec: MetricSpec) -> None:
    assert spec.name.startswith("xmon_")
    assert SNAKE.match(spec.name), spec.name
    assert spec.type in ("gauge", "counter", "summary", "histogram", "info")
    assert spec.name.endswith("_total") == (spec.type == "counter")
    assert spec.name.endswith("_info") == (spec.type == "info")
    for suffix in ("_count", "_sum", "_bucket", "_created"):
        assert not spec.name.endswith(suffix)


@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_unit_is_in_the_name(spec: MetricSpec) -> None:
    if spec.unit in UNIT_SUFFIX:
        base = spec.name.removesuffix("_total")
        assert UNIT_SUFFIX[spec.unit] in base, (spec.name, spec.unit)
    assert not re.search(r"_(ms|milliseconds|kb|mb|gb|mib|percent|bits)(_|$)", spec.name)


@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_labels_and_help(spec: MetricSpec) -> None:
    assert len(set(spec.labels)) == len(spec.labels)
    for label in spec.labels:
        assert SNAKE.match(label), label
        assert label not in RESERVED_LABELS
    assert spec.help and not spec.help[0].islower() and spec.help.endswith(".")
    assert "\n" not in spec.help
    assert spec.source


def test_job_series_are_keyed_by_job_name_and_pid() -> None:
    for spec in METRICS:
        if spec.name.startswith(("xmon_job_", "xmon_agent_")):
            assert spec.labels[:2] == ("job_name", "pid"), spec.name


def test_checked_in_docs_match_the_table() -> None:
    assert DOCS.read_text() == render_markdown(), (
        "docs/metrics.md is stale: run `python -m xmon.exporters.metrics_table > docs/metrics.md`"
    )


def test_every_metric_is_documented() -> None:
    text = render_markdown()
    for spec in METRICS:
        assert f"`{spec.name}`" in text
