"""Structural lint for Grafana dashboards, after grafana/dashboard-linter's useful rules.

    python -m dashboards.lint dashboards/*.json   # one problem per line, exit 1 if any

Checks: one ``datasource`` variable of type datasource (query prometheus) that every panel and
target uses, no hard-coded data source uid and no ``${DS_...}`` import placeholders (they break
file provisioning), unique panel ids, panels inside the 24-column grid, a title, description
and known unit on every panel, ``$__rate_interval`` (or ``$__range``) in every range function,
an ``instance`` matcher on every xmon series, defined ``$variables``, and metric names that are
in xmon's metric table.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dashboards.alerts import RECORDS
from dashboards.grafana import (
    DATASOURCE,
    GRID_COLUMNS,
    PROMETHEUS_SERIES,
    SCHEMA_VERSION,
    metric_names,
    table_name,
)

_RECORDED = re.compile(r"\bxmon:[a-z0-9_:]+")
RECORDED_NAMES = frozenset(record.name for record in RECORDS)
UNITS = frozenset({"none", "short", "percentunit", "bytes", "s", "Bps", "flops", "watt",
                   "celsius", "hertz"})  # fmt: skip
PANEL_TYPES = frozenset({"row", "timeseries", "stat", "table", "heatmap"})
BUILTIN_VARIABLES = frozenset({"__rate_interval", "__range", "__interval", "datasource"})
_RANGE = re.compile(r"\b(?:rate|irate|increase|delta|[a-z]+_over_time)\([^\[]*\[([^\]]+)\]")
_VARIABLE = re.compile(r"\$\{?(\w+)")
_SELECTOR = re.compile(r"\b(xmon_[a-z0-9_]+)\s*(\{[^}]*\})?")


def panels(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in data.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def expressions(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expr) of every query target."""
    for panel in panels(data):
        for target in panel.get("targets", []):
            yield panel.get("title", "?"), target.get("expr", "")


def _datasource_uids(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        source = node.get("datasource")
        if isinstance(source, dict):
            yield str(source.get("uid"))
        elif isinstance(source, str):
            yield source
        for value in node.values():
            yield from _datasource_uids(value)
    elif isinstance(node, list):
        for item in node:
            yield from _datasource_uids(item)


def _check_templating(data: dict[str, Any]) -> Iterator[str]:
    variables = data.get("templating", {}).get("list", [])
    sources = [v for v in variables if v.get("type") == "datasource"]
    if len(sources) != 1 or sources[0].get("name") != "datasource":
        yield "needs exactly one data source variable, named datasource"
    elif sources[0].get("query") != "prometheus":
        yield "the datasource variable must list prometheus data sources"
    text = json.dumps(data)
    if "${DS_" in text or "__inputs" in data:
        yield "contains import placeholders (${DS_...} or __inputs): breaks provisioning"
    for uid in _datasource_uids(data):
        if uid != DATASOURCE["uid"]:
            yield f"hard-coded data source {uid!r}: use ${{datasource}}"


def _check_layout(data: dict[str, Any]) -> Iterator[str]:
    seen: set[int] = set()
    for panel in panels(data):
        pid, title = panel.get("id"), panel.get("title", "?")
        if not isinstance(pid, int) or pid in seen:
            yield f"panel {title!r}: id {pid!r} missing or not unique"
        seen.add(pid if isinstance(pid, int) else -1)
        pos = panel.get("gridPos", {})
        if pos.get("x", 0) + pos.get("w", 0) > GRID_COLUMNS or pos.get("w", 0) <= 0:
            yield f"panel {title!r}: gridPos {pos} outside the {GRID_COLUMNS}-column grid"
        if panel.get("type") not in PANEL_TYPES:
            yield f"panel {title!r}: type {panel.get('type')!r} not one of {sorted(PANEL_TYPES)}"


def _check_panel(panel: dict[str, Any]) -> Iterator[str]:
    title = panel.get("title", "")
    if not title or not panel.get("description"):
        yield f"panel {title!r}: needs a title and a description"
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    if unit not in UNITS:
        yield f"panel {title!r}: unit {unit!r} not one of {sorted(UNITS)}"
    if panel.get("datasource") != DATASOURCE:
        yield f"panel {title!r}: must use the datasource variable"
    for target in panel.get("targets", []):
        if target.get("datasource") != DATASOURCE:
            yield f"panel {title!r}: target {target.get('refId')} must use the datasource variable"
    if not panel.get("targets"):
        yield f"panel {title!r}: has no queries"


def check_expr(expr: str, defined: set[str], filtered: bool = True) -> Iterator[str]:
    """Problems of one PromQL expression. Alert rules pass ``defined`` empty (no variables,
    fixed windows); ``filtered`` False skips the instance matcher (the instance variable)."""
    for window in _RANGE.findall(expr):
        if defined and window not in ("$__rate_interval", "$__range"):
            yield f"range [{window}] in {expr!r}: use $__rate_interval"
    for name in _VARIABLE.findall(expr):
        if name not in defined | BUILTIN_VARIABLES:
            yield f"undefined variable ${name} in {expr!r}"
    for name in metric_names(expr):
        if name not in PROMETHEUS_SERIES and table_name(name) is None:
            yield f"{name} is not in xmon.exporters.metrics_table (in {expr!r})"
    for name in _RECORDED.findall(expr):
        if name not in RECORDED_NAMES:
            yield f"{name} is not a recording rule of dashboards/alerts.py (in {expr!r})"
    for name, braces in _SELECTOR.findall(expr):
        if defined and filtered and 'instance=~"$instance"' not in (braces or ""):
            yield f'{name} without instance=~"$instance" in {expr!r}'


def lint_dashboard(data: dict[str, Any]) -> list[str]:
    """Every problem found, as one line each; empty when the dashboard is clean."""
    problems = [*_check_templating(data), *_check_layout(data)]
    if not isinstance(data.get("schemaVersion"), int) or data["schemaVersion"] < SCHEMA_VERSION:
        problems.append(f"schemaVersion must be >= {SCHEMA_VERSION}")
    if not data.get("uid") or len(data["uid"]) > 40:
        problems.append("uid missing or longer than 40 characters")
    defined = {v["name"] for v in data.get("templating", {}).get("list", [])}
    for panel in panels(data):
        if panel.get("type") != "row":
            problems.extend(_check_panel(panel))
    for _, expr in expressions(data):
        problems.extend(check_expr(expr, defined))
    for variable in data.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query, filtered = variable.get("definition", ""), variable["name"] != "instance"
            problems.extend(check_expr(query, defined, filtered))
    return problems


def main(argv: list[str]) -> int:
    status = 0
    for name in argv:
        for problem in lint_dashboard(json.loads(Path(name).read_text())):
            print(f"{name}: {problem}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
