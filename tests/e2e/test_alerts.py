"""Alert rules: promtool check and unit tests, structure, and names from the metric table.

Every rule's expression and signal parts also run against a real Prometheus in
test_promql_e2e.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dashboards.alerts import ALERTS, RECORDS  # noqa: E402

RULES = REPO / "dashboards" / "alerts" / "xmon.rules.yml"
RULE_TESTS = REPO / "dashboards" / "alerts" / "xmon.rules.test.yml"
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)"
)


def promtool(*args: str, cwd: Path = RULES.parent) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@needs_promtool
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS) + len(RECORDS)} rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_unit_tests_fail_when_a_threshold_drifts(tmp_path: Path) -> None:
    """The unit tests pin the thresholds: a looser rule file makes them fail."""
    (tmp_path / "xmon.rules.yml").write_text(RULES.read_text().replace("> 0.95", "> 0.99"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "XmonDeviceMemoryNearFull" in result.stdout + result.stderr
