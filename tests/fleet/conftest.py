"""Each test module of tests/fleet that asks for ``running`` gets a two-process job of its own
(module scope), so the five-minute healthy run and the faults run side by side in a parallel
run; the modules name an ``xdist_group`` to keep their tests on one worker with their job."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from running_fleet import Fleet, started_fleet, wait_until_running


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    yield from started_fleet(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def running(fleet: Fleet) -> Fleet:
    """Every process reports its job key, process index and host time per step."""
    return wait_until_running(fleet)
