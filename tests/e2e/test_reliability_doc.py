"""docs/reliability.md names only tests that exist, and its totals are what pytest collects.

Every `test_...` name in the page is a test function under tests/, every `tests/...py` path a
file, and each row of the totals table counts the cases pytest collects from that file (test
functions and parametrized cases), so the page cannot drift from the tests it cites.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
TOTALS_ROW = re.compile(r"^\| `(tests/[\w/]+\.py)` \| (\d+) \| (\d+) \| (\d+) \|", re.MULTILINE)
TOTALS_SUM = re.compile(r"^\| \*\*all\*\* \| \*\*(\d+)\*\* \| \*\*(\d+)\*\* \| \*\*(\d+)\*\* \|",
                        re.MULTILINE)  # fmt: skip


def test_the_totals_count_what_pytest_collects() -> None:
    text = DOC.read_text()
    rows = {path: (int(tried), int(passed), int(lost)) for path, tried, passed, lost
            in TOTALS_ROW.findall(text)}  # fmt: skip
    assert rows, "no totals table"
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/faults", "tests/security"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    cases = Counter(line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line)
    assert cases, collected.stdout[-2000:] + collected.stderr[-2000:]
    assert {path: row[0] for path, row in rows.items()} == dict(cases)
    assert all(passed <= tried and lost == 0 for tried, passed, lost in rows.values()), rows
    total = TOTALS_SUM.search(text)
    assert total is not None, "no totals line"
    assert [int(n) for n in total.groups()] == [
        sum(row[i] for row in rows.values()) for i in range(3)
    ]
