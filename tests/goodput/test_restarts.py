"""Time lost to restarts (xmon.goodput.restarts): matched by job key and process index,
bounded, never negative."""

from __future__ import annotations

from xmon.goodput import restarts
from xmon.goodput.restarts import RestartMemory


def test_a_restart_costs_from_the_last_step_to_the_next_first_step() -> None:
    memory = RestartMemory()
    memory.ended(("run-7", 0), 1000.0)
    memory.ended(("run-7", 1), 1002.0)
    assert memory.lost(("run-7", 0), 1090.0) == 90.0
    assert memory.lost(("run-7", 1), 1090.0) == 88.0
    assert memory.lost(("run-8", 0), 1090.0) is None  # another job
    assert memory.lost(("run-7", 0), 0.0) is None  # not stepped yet
    assert memory.lost(("run-7", 0), 999.0) is None  # stepping before the other ended: no restart
    memory.ended(("run-7", 0), 0.0)  # a process that never stepped leaves the last one's time
    assert memory.lost(("run-7", 0), 1090.0) == 90.0


def test_the_memory_is_bounded_and_forgets_the_least_recent(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(restarts, "MAX_KEYS", 3)
    memory = RestartMemory()
    for i in range(5):
        memory.ended((f"job-{i}", 0), 100.0 + i)
    assert len(memory) == 3
    assert memory.lost(("job-0", 0), 200.0) is None
    assert memory.lost(("job-4", 0), 200.0) == 96.0
    assert memory.lost(("job-4", 0), 100.0 + restarts.MAX_AGE_SECONDS + 10) is None  # too old
