from __future__ import annotations

import os

# Before any test module imports jax: several virtual CPU devices, CPU backend only.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import shutil  # noqa: E402
import subprocess  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from procs import Daemon, Prometheus, start_daemon, start_prometheus


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A real `xmon daemon` on a temporary socket and a free metrics port."""
    proc = start_daemon(tmp_path / "daemon")
    yield proc
    proc.stop()


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[object]:
    """Factory: a real Prometheus scraping the given targets every second."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (apt-get install -y prometheus)")
    started: list[Prometheus] = []

    def start(targets: list[str], rule_files: list[Path] = ()) -> Prometheus:
        prom = start_prometheus(tmp_path / f"prometheus{len(started)}", targets, rule_files)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()


@pytest.fixture(autouse=True)
def _processes_only_in_e2e(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that starts a process is marked e2e, so that ``-m "not e2e"`` stays a fast lane
    (no daemon, no JAX job, no tool run). Any way of starting one through ``subprocess`` (run,
    Popen, asyncio's subprocesses) counts. ``XMON_TEST_PROCESS_LOG=PATH`` lists the starts
    there instead of refusing them, to find every such test in one run."""
    if request.node.get_closest_marker("e2e") is not None:
        return
    start = subprocess.Popen.__init__
    where = request.node.nodeid

    def refused(self: subprocess.Popen[bytes], args: object, *rest: Any, **kwargs: Any) -> None:
        log = os.environ.get("XMON_TEST_PROCESS_LOG")
        if log:
            with open(log, "a") as out:
                out.write(f"{where}\t{str(args)[:120]}\n")
            return start(self, args, *rest, **kwargs)  # type: ignore[arg-type]
        raise AssertionError(f"{where} starts a process ({args!r:.80}): mark it e2e")

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)
