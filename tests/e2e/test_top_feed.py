"""Where ``xmon top`` gets snapshots: the real daemon's stream, through daemon loss and return;
and the views never import jax."""

from __future__ import annotations

import queue
import subprocess
import sys
from pathlib import Path

from xmon.model import Snapshot
from xmon.top.feed import DaemonSource, FeedEvent, FeedStatus, FeedThread

from support.procs import base_env, start_daemon


def collect(source: DaemonSource) -> tuple[FeedThread, queue.Queue[FeedEvent]]:
    events: queue.Queue[FeedEvent] = queue.Queue()

    def deliver(event: FeedEvent) -> bool:
        events.put(event)
        return True

    thread = FeedThread(source, deliver)
    thread.start()
    return thread, events


def next_matching(events: queue.Queue[FeedEvent], wanted: type, timeout: float = 60) -> FeedEvent:
    while True:
        event = events.get(timeout=timeout)
        if isinstance(event, wanted):
            return event


def next_connected(events: queue.Queue[FeedEvent], timeout: float = 60) -> FeedStatus:
    """The next "connected" status; retries that failed before the daemon was up are skipped."""
    while True:
        event = next_matching(events, FeedStatus, timeout)
        assert isinstance(event, FeedStatus)
        if event.connected:
            return event
        assert "not reachable" in event.message, event


def test_daemon_source_survives_the_daemon_going_away_and_coming_back(tmp_path: Path) -> None:
    socket_path = tmp_path / "daemon" / "xmon.sock"
    socket_path.parent.mkdir()
    source = DaemonSource(socket_path)
    thread, events = collect(source)
    try:
        first = next_matching(events, FeedStatus)
        assert first == FeedStatus(False, f"connecting to the daemon at {socket_path}")
        absent = next_matching(events, FeedStatus)
        assert absent == FeedStatus(False, f"daemon not reachable at {socket_path}, retrying")
        daemon = start_daemon(tmp_path / "daemon")
        try:
            assert next_connected(events) == FeedStatus(True, f"connected to {socket_path}")
            assert isinstance(next_matching(events, Snapshot), Snapshot)
        finally:
            daemon.stop()
        lost = next_matching(events, FeedStatus)
        assert not lost.connected and "not reachable" in lost.message  # type: ignore[union-attr]
        daemon = start_daemon(tmp_path / "daemon")  # same socket, a new daemon
        try:
            assert next_connected(events) == FeedStatus(True, f"connected to {socket_path}")
            snapshot = next_matching(events, Snapshot)
            assert isinstance(snapshot, Snapshot) and snapshot.seq >= 1
        finally:
            daemon.stop()
    finally:
        thread.stop()


VIEWS_WITHOUT_JAX = """
import sys
from xmon.cli.main import build_parser
build_parser()
import xmon.cli.top, xmon.cli.monitor, xmon.views.monitor_report, xmon.top.app
from xmon.top.app import XmonTop
XmonTop([])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"jax", "jaxlib", "numpy"})
print(",".join(heavy))
"""


def test_views_do_not_import_jax() -> None:
    result = subprocess.run(
        [sys.executable, "-c", VIEWS_WITHOUT_JAX],
        capture_output=True, text=True, timeout=120, env=base_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
