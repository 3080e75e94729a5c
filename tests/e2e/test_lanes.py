"""The fast lane, ``pytest -m "not e2e"``, starts no process: a test that does is marked e2e
(tests/conftest.py refuses the start otherwise, naming the test)."""

from __future__ import annotations

import subprocess
import sys


def test_a_test_marked_e2e_can() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=True).returncode == 0
