"""Grafana dashboards: generated from code, checked in, structurally linted, provisionable.

Every query of every panel is also run against a real Prometheus in test_promql_e2e.py.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dashboards import generate  # noqa: E402
from dashboards.grafana import metric_names, needs, table_name  # noqa: E402
from dashboards.lint import expressions, lint_dashboard, panels  # noqa: E402

DASHBOARDS = sorted((REPO / "dashboards").glob("xmon-*.json"))
PROVISIONING = REPO / "dashboards" / "provisioning"


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def test_checked_in_files_are_what_the_generator_writes() -> None:
    assert generate.stale(generate.outputs()) == [], "run: python -m dashboards.generate"
    assert [p.name for p in DASHBOARDS] == sorted(
        generate.dashboard_path(b).name for b in generate.BOARDS
    )


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    files = {tmp_path / "a.json": "{}\n"}
    assert generate.stale(files) == [tmp_path / "a.json"]
    (tmp_path / "a.json").write_text("{}\n")
    assert generate.stale(files) == []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_is_clean(path: Path) -> None:
    assert lint_dashboard(load(path)) == []


def test_dashboards_cover_the_four_views_with_unique_uids() -> None:
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert sorted(uids) == ["xmon-device", "xmon-fleet", "xmon-health", "xmon-job"]
    variables = {load(p)["uid"]: [v["name"] for v in load(p)["templating"]["list"]]
                 for p in DASHBOARDS}  # fmt: skip
    assert variables["xmon-job"] == ["datasource", "instance", "job_name", "device"]
    assert variables["xmon-device"] == ["datasource", "instance", "device"]


def _mutated(change: str) -> dict[str, Any]:
    data = copy.deepcopy(load(REPO / "dashboards" / "xmon-job.json"))
    first = next(p for p in panels(data) if p["type"] != "row")
    if change == "placeholder":
        data["__inputs"] = [{"name": "DS_PROMETHEUS", "type": "datasource"}]
        first["datasource"] = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    elif change == "uid":
        first["targets"][0]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
    elif change == "duplicate id":
        first["id"] = data["panels"][0]["id"]
    elif change == "rate window":
        first["targets"][0]["expr"] = 'rate(xmon_job_steps_total{instance=~"$instance"}[5m])'
    elif change == "unknown metric":
        first["targets"][0]["expr"] = 'xmon_job_mfu{instance=~"$instance"}'
    elif change == "no instance":
        first["targets"][0]["expr"] = "xmon_job_steps_total"
    elif change == "unit":
        first["fieldConfig"]["defaults"]["unit"] = "percent-ish"
    elif change == "no datasource variable":
        data["templating"]["list"] = data["templating"]["list"][1:]
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("placeholder", "import placeholders"),
        ("uid", "hard-coded data source 'P1809F7CD0C75ACF3'"),
        ("duplicate id", "missing or not unique"),
        ("rate window", "range [5m]"),
        ("unknown metric", "xmon_job_mfu is not in xmon.exporters.metrics_table"),
        ("no instance", 'xmon_job_steps_total without instance=~"$instance"'),
        ("unit", "unit 'percent-ish'"),
        ("no datasource variable", "exactly one data source variable"),
    ],
)
def test_lint_catches(change: str, message: str) -> None:
    problems = lint_dashboard(_mutated(change))
    assert any(message in p for p in problems), problems


def test_every_metric_comes_from_the_table() -> None:
    names = {n for path in DASHBOARDS for _, e in expressions(load(path)) for n in metric_names(e)}
    assert {"xmon_job_model_flops_utilization_ratio", "xmon_device_memory_used_bytes"} <= names
    assert all(table_name(n) or n in ("up", "scrape_duration_seconds", "scrape_samples_scraped")
               for n in names), names  # fmt: skip


def _titles_and_names(uid: str) -> list[tuple[str, set[str]]]:
    board = load(REPO / "dashboards" / f"{uid}.json")
    return [(p["title"], {n for t in p.get("targets", []) for n in metric_names(t["expr"])})
            for p in panels(board)]  # fmt: skip


def test_job_board_shows_hfu_and_mfu_side_by_side_with_busy_and_the_ledger() -> None:
    job = _titles_and_names("xmon-job")
    titles = [title for title, _ in job]
    for first in (titles.index("HFU"), len(titles) - 1 - titles[::-1].index("HFU")):
        assert titles[first + 1] == "MFU"  # the overview stat and the utilisation panel
    names = set().union(*(n for _, n in job))
    assert {"xmon_job_hardware_flops_utilization_ratio", "xmon_job_device_busy_ratio",
            "xmon_job_flops_lower_bound", "xmon_job_steps_inferred",
            "xmon_agent_ledger_samples_total", "xmon_job_program_flops_xla",
            "xmon_job_tokens_per_second"} <= names  # fmt: skip
    health = set().union(*(n for _, n in _titles_and_names("xmon-health")))
    assert {"xmon_agent_ledger_samples_skipped_total", "xmon_job_ledger_parse_errors_total"} <= (
        health
    )


def test_hardware_panels_say_so() -> None:
    for path in DASHBOARDS:
        for panel in panels(load(path)):
            kinds = {needs(t["expr"]) for t in panel.get("targets", [])} - {None}
            if "hardware" in kinds:
                assert "hardware collector" in panel["description"], panel["title"]
            if "allocator" in kinds:
                assert "PJRT allocator" in panel["description"], panel["title"]


def test_provisioning_files() -> None:
    sources = yaml.safe_load((PROVISIONING / "datasources" / "xmon.yaml").read_text())
    assert sources["apiVersion"] == 1
    assert [s["type"] for s in sources["datasources"]] == ["prometheus"]
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "xmon.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    for path in DASHBOARDS:  # what a provisioned file must not contain
        text = path.read_text()
        assert "${DS_" not in text and "__inputs" not in text
