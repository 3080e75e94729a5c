"""The fast lane, ``pytest -m "not e2e"``, starts no process: a test that does is marked e2e
(tests/conftest.py refuses the start otherwise, naming the test)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest


def test_a_test_not_marked_e2e_cannot_start_a_process() -> None:
    with pytest.raises(AssertionError, match="test_lanes.py::.* starts a process .*mark it e2e"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    async def spawn() -> None:
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")

    with pytest.raises(AssertionError, match="mark it e2e"):
        asyncio.run(spawn())


@pytest.mark.e2e
def test_a_test_marked_e2e_can() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=True).returncode == 0
