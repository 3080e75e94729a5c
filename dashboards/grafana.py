"""A small Grafana dashboard model and its JSON rendering (schemaVersion 39, Grafana >= 10).

Every panel and query uses the ``datasource`` template variable, so one file works for the
UI import dialog and for file provisioning (no ``${DS_...}`` placeholders, no ``__inputs``).
Panels flow left to right in rows of a 24-column grid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from xmon.exporters.metrics_table import SPEC_BY_NAME

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
GRID_COLUMNS = 24
PanelKind = Literal["timeseries", "stat", "table", "heatmap"]

# Series that need hardware this machine's CI lacks. xmon_device_*: a TPU or GPU hardware
# collector. The allocator stats: a PJRT allocator (TPU/GPU; on CPU memory_stats() is None).
ALLOCATOR_METRICS = frozenset(
    {
        "xmon_job_device_memory_peak_bytes",
        "xmon_job_device_memory_limit_bytes",
        "xmon_job_device_memory_reserved_bytes",
        "xmon_job_device_memory_largest_free_block_bytes",
        "xmon_job_device_memory_largest_alloc_bytes",
        "xmon_job_device_memory_pool_bytes",
        "xmon_job_device_allocations_total",
        "xmon_job_device_memory_fragmentation_ratio",
    }
)
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
_METRIC = re.compile(r"\b(xmon_[a-z0-9_]+|up|scrape_[a-z_]+)\b(?!\s*\()")
_SUMMARY_SUFFIXES = ("_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (label names inside braces are skipped)."""
    outside_braces = re.sub(r"\{[^}]*\}", "{}", expr)
    outside_by = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "",
                        outside_braces)  # fmt: skip
    return set(_METRIC.findall(outside_by))


def table_name(name: str) -> str | None:
    """The METRICS entry a series name belongs to (summary _sum/_count included), if any."""
    if name in SPEC_BY_NAME:
        return name
    for suffix in _SUMMARY_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and SPEC_BY_NAME.get(base) and SPEC_BY_NAME[base].type == "summary":
            return base
    return None


def needs(expr: str) -> str | None:
    """What an expression needs beyond a CPU host: "hardware", "allocator" or None."""
    names = metric_names(expr)
    if any(n.startswith("xmon_device_") for n in names):
        return "hardware"
    if names & ALLOCATOR_METRICS:
        return "allocator"
    return None


NEEDS_TEXT = {
    "hardware": " Needs a TPU or GPU hardware collector (no data on CPU-only hosts).",
    "allocator": " Needs a PJRT allocator (TPU or GPU; CPU devices have no memory_stats).",
}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    kind: PanelKind = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    max: float | None = None
    links: tuple[tuple[str, str, str], ...] = ()  # (field, link title, url) for tables
    stacked: bool = False  # timeseries: series stacked (parts of one whole), filled


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(...) as Grafana's Prometheus data source takes it
    multi: bool = True


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = ("xmon",)
    extra: dict[str, Any] = field(default_factory=dict)


def q(expr: str, legend: str = "") -> Query:
    return Query(" ".join(expr.split()), legend)


# --- rendering -------------------------------------------------------------------------------


def _target(query: Query, ref: int, table: bool) -> dict[str, Any]:
    target: dict[str, Any] = {
        "datasource": DATASOURCE,
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "refId": chr(ord("A") + ref),
    }
    if table:
        target.update(format="table", instant=True, range=False)
    else:
        target.update(range=True, instant=False)
    return target


def _description(panel: Panel) -> str:
    kinds = {kind for query in panel.queries if (kind := needs(query.expr)) is not None}
    extra = "".join(NEEDS_TEXT[k] for k in sorted(kinds))
    return panel.description + extra


def _field_config(panel: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.max is not None:
        defaults.update(min=0, max=panel.max)
    if panel.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never", "spanNulls": False}  # fmt: skip
        if panel.stacked:
            defaults["custom"].update(fillOpacity=70, stacking={"mode": "normal", "group": "A"})
    overrides = [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "links", "value": [{"title": title, "url": url}]}],
        }
        for name, title, url in panel.links
    ]
    return {"defaults": defaults, "overrides": overrides}


_OPTIONS: dict[str, dict[str, Any]] = {
    "timeseries": {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    },
    "stat": {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
        "orientation": "auto", "textMode": "auto",
    },
    "table": {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}},
    "heatmap": {
        "calculate": False, "cellGap": 1, "showValue": "never",
        "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64, "exponent": 0.5,
                  "fill": "dark-orange", "reverse": False},
        "rowsFrame": {"layout": "auto"}, "yAxis": {"axisPlacement": "left"},
        "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": True},
        "legend": {"show": True},
    },
}  # fmt: skip


def _transformations(panel: Panel) -> list[dict[str, Any]]:
    if panel.kind != "table":
        return []
    hide = {"Time": True, "__name__": True, "job": True}
    return [{"id": "merge", "options": {}}, {"id": "organize", "options": {"excludeByName": hide}}]


def render_panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    options = dict(_OPTIONS[panel.kind])
    if panel.kind == "heatmap":
        options["cellValues"] = {"unit": panel.unit}
    table = panel.kind == "table"
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": _description(panel),
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": _field_config(panel),
        "options": options,
        "targets": [_target(query, i, table) for i, query in enumerate(panel.queries)],
        "transformations": _transformations(panel),
    }


def _row(row: Row, panel_id: int, y: int) -> dict[str, Any]:
    grid = {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y}
    return {"id": panel_id, "type": "row", "title": row.title, "collapsed": False,
            "gridPos": grid, "panels": []}  # fmt: skip


def _layout(rows: tuple[Row, ...]) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row in rows:
        panels.append(_row(row, next_id, y))
        next_id, y, x, line_height = next_id + 1, y + 1, 0, 0
        for panel in row.panels:
            if x + panel.width > GRID_COLUMNS:
                x, y, line_height = 0, y + line_height, 0
            panels.append(render_panel(panel, next_id, x, y))
            next_id, x, line_height = next_id + 1, x + panel.width, max(line_height, panel.height)
        y += line_height
    return panels


def _variable(var: Variable) -> dict[str, Any]:
    return {
        "name": var.name, "label": var.label, "type": "query", "datasource": DATASOURCE,
        "definition": var.query,
        "query": {"query": var.query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2, "sort": 1, "regex": "", "hide": 0,
        "multi": var.multi, "includeAll": True, "allValue": ".*",
        "current": {}, "options": [],
    }  # fmt: skip


def _datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "regex": "", "hide": 0, "multi": False,
            "includeAll": False, "refresh": 1, "current": {}, "options": []}  # fmt: skip


def render_board(board: Board) -> dict[str, Any]:
    """The dashboard JSON model, ready for provisioning or the import dialog."""
    return {
        "uid": board.uid,
        "title": board.title,
        "description": board.description,
        "tags": list(board.tags),
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "version": 1,
        "links": [
            {
                "title": "xmon dashboards",
                "type": "dashboards",
                "tags": ["xmon"],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            }
        ],  # fmt: skip
        "templating": {"list": [_datasource_variable(), *map(_variable, board.variables)]},
        "panels": _layout(board.rows),
        **board.extra,
    }
