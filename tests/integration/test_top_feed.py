"""Where ``xmon top`` gets snapshots: the real daemon's stream, through daemon loss and return;
and the views never import jax."""

from __future__ import annotations

import threading
from pathlib import Path

from xmon.top.feed import DaemonSource


def test_close_stops_a_source_that_is_waiting_to_retry(tmp_path: Path) -> None:
    source = DaemonSource(tmp_path / "absent.sock")
    finished = threading.Event()

    def drain() -> None:
        for _ in source:
            pass
        finished.set()

    threading.Thread(target=drain, daemon=True).start()
    source.close()
    assert finished.wait(30)
