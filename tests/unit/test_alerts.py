"""Alert rules: promtool check and unit tests, structure, and names from the metric table.

Every rule's expression and signal parts also run against a real Prometheus in
test_promql_e2e.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dashboards.alerts import ALERTS, RECORDS, render_rules  # noqa: E402
from dashboards.lint import check_expr  # noqa: E402

RULES = REPO / "dashboards" / "alerts" / "xmon.rules.yml"
RULE_TESTS = REPO / "dashboards" / "alerts" / "xmon.rules.test.yml"


def test_every_alert_is_unit_tested() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t.get("alert_rule_test", [])}
    firing = {
        case["alertname"]
        for t in tests
        for case in t.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert tested == firing == {a.name for a in ALERTS}


def test_rules_file_matches_the_definitions() -> None:
    assert RULES.read_text() == render_rules(), "run: python -m dashboards.generate"
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    alerts = [rule for rule in rules if "alert" in rule]
    records = [rule for rule in rules if "record" in rule]
    assert len(alerts) + len(records) == len(rules)
    assert [r["alert"] for r in alerts] == [a.name for a in ALERTS]
    assert [r["expr"] for r in alerts] == [a.expr for a in ALERTS]
    assert [(r["record"], r["expr"]) for r in records] == [(r.name, r.expr) for r in RECORDS]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_recording_rule_is_well_formed(record: object) -> None:
    from dashboards.rule_types import Record

    assert isinstance(record, Record)
    assert re.fullmatch(r"xmon:[a-z_]+:[a-z_]+(:[a-z_]+)?", record.name)  # level:metric:ops
    assert list(check_expr(record.expr, set())) == []
    assert record.help


def test_every_recording_rule_is_read_by_an_alert_a_test_or_another_rule() -> None:
    used = " ".join([a.expr for a in ALERTS] + [r.expr for r in RECORDS]) + RULE_TESTS.read_text()
    assert [r.name for r in RECORDS if used.count(r.name) < 1] == []


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a.name)
def test_alert_is_well_formed(alert: object) -> None:
    from dashboards.alerts import Alert

    assert isinstance(alert, Alert)
    assert re.fullmatch(r"Xmon[A-Z][A-Za-z]+", alert.name)
    assert alert.severity in ("info", "warning", "critical")
    assert re.fullmatch(r"\d+[smh]", alert.for_)
    assert alert.parts and all(part in alert.expr for part in alert.parts), alert.parts
    assert list(check_expr(alert.expr, set())) == []  # names from the table, no variables
    assert alert.summary and alert.description
