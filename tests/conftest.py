from __future__ import annotations

import os

# Before any test module imports jax: several virtual CPU devices, CPU backend only.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from support.procs import Daemon, Prometheus, start_daemon, start_prometheus


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
    """A test that starts a process is marked e2e (every test under tests/e2e is), so that
    ``-m "not e2e"`` stays a fast lane (no daemon, no JAX job, no tool run). Any way of
    starting one through ``subprocess`` (run, Popen, asyncio's subprocesses) counts.
    ``XMON_TEST_PROCESS_LOG=PATH`` lists the starts there instead of refusing them, to find
    every such test in one run."""
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
        raise AssertionError(
            f"{where} starts a process ({args!r:.80}): mark it e2e (or move it to tests/e2e)"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)


TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers are marked by directory: every test under tests/e2e is e2e (it starts
    processes), every test under tests/integration is integration (it opens sockets)."""
    for item in items:
        path = item.path.resolve()
        tier = path.relative_to(TESTS).parts[0] if TESTS in path.parents else ""
        if tier in ("e2e", "integration"):
            item.add_marker(tier)
    _longest_first(items)


def _group(item: pytest.Item) -> str:
    """What runs together on one worker of a parallel run: a module whose tests share a
    module-scoped fixture (a fleet, a set of pathology jobs) names an ``xdist_group``."""
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return item.nodeid
    return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))


def _longest_first(items: list[pytest.Item]) -> None:
    """The longest groups first, by their tests' ``slow(seconds)``: a parallel run
    (``--dist loadgroup --no-loadscope-reorder``) hands work out in this order, so the
    five-minute runs start at once beside the rest instead of last on a worker of their own.
    The sort is stable: the rest keep pytest's order, and the same on every worker."""
    seconds: dict[str, float] = defaultdict(float)
    for item in items:
        slow = item.get_closest_marker("slow")
        seconds[_group(item)] += float(slow.args[0]) if slow else 0.0
    items.sort(key=lambda item: -seconds[_group(item)])


@pytest.fixture(autouse=True)
def _sockets_only_past_unit(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """tests/unit opens no socket: a test that makes one (a socket.socket of its own, a gRPC
    server or channel) belongs in tests/integration, and fails saying so. Socket pairs (asyncio's
    own wake-up pair) are not counted. ``XMON_TEST_SOCKET_LOG=PATH`` lists there, for every test
    not marked e2e or integration, what it opens, instead of refusing it."""
    log = os.environ.get("XMON_TEST_SOCKET_LOG")
    marked = any(request.node.get_closest_marker(m) for m in ("e2e", "integration"))
    in_unit = TESTS / "unit" in request.node.path.resolve().parents
    if not (in_unit or (log and not marked)):
        yield
        return
    import grpc
    import grpc.aio

    where = request.node.nodeid
    in_threads: list[str] = []

    def opened(what: str) -> None:
        if log:
            with open(log, "a") as out:
                out.write(f"{where}\t{what}\n")
            return
        if threading.current_thread() is not threading.main_thread():
            in_threads.append(what)  # a thread may swallow the error: the test fails at its end
        raise AssertionError(f"{where} opens a socket ({what}): move it to tests/integration")

    init = socket.socket.__init__

    def socket_init(self: socket.socket, family: Any = -1, type: Any = -1, proto: Any = -1,
                    fileno: Any = None) -> None:  # fmt: skip
        if fileno is None:  # made afresh, not a socket pair's or an accepted one
            opened(f"socket.socket({family}, {type})")
        init(self, family, type, proto, fileno)

    monkeypatch.setattr(socket.socket, "__init__", socket_init)
    for module in (grpc, grpc.aio):
        for name in ("server", "insecure_channel", "secure_channel"):
            real = getattr(module, name)

            def refused(*args: Any, _real: Any = real, _name: str = f"{module.__name__}.{name}",
                        **kwargs: Any) -> Any:  # fmt: skip
                opened(f"{_name}({str(args[:1])[:60]})")
                return _real(*args, **kwargs)

            monkeypatch.setattr(module, name, refused)
    yield
    if in_threads:
        pytest.fail(f"{where} opens a socket ({in_threads[0]}): move it to tests/integration")
