"""A process's descendants, and a check that every one of them is gone."""

from __future__ import annotations

import psutil


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def assert_all_gone(processes: list[psutil.Process], timeout: float = 20.0) -> None:
    _gone, alive = psutil.wait_procs(processes, timeout=timeout)
    survivors = [" ".join(p.cmdline()) for p in alive if p.is_running()]
    for process in alive:  # never leave them behind, even when the test fails
        process.kill()
    assert not survivors, f"outlived the demo: {survivors}"
