"""Findings in ``xmon top``: the marks on job rows and tabs, the host's note in the title bar,
and the findings view (``f``) with its scrollable thread stacks; first on constructed
snapshots, then against a real daemon and the pathology suite's job stalled in a lock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from diagnosis import pathology_jobs as scripts
from textual.containers import VerticalScroll

from xmon.top.app import XmonTop
from xmon.top.feed import DaemonSource

from support.procs import start_daemon, start_job
from support.top_app import screen_text, sees, until


def test_top_shows_a_real_stall_and_its_stack(tmp_path: Path) -> None:
    """The pathology suite's job that waits on a lock forever, against a real daemon: its
    row is marked, and f shows the stall with the main thread's stack, scrolled with keys."""
    daemon = start_daemon(tmp_path / "daemon")
    stall = start_job(tmp_path, daemon.socket_path, scripts.STALL_IN_LOCK, "stall",
                      JOB_STOP=str(tmp_path / "stall.stop"))  # fmt: skip

    def stalled(app: XmonTop) -> bool:
        jobs = app.snapshot.jobs if app.snapshot is not None else ()
        return any(f.kind == "stall" and f.detail for j in jobs for f in j.findings)

    async def scenario() -> None:
        app = XmonTop(DaemonSource(daemon.socket_path), refresh_seconds=0.2)
        async with app.run_test(size=(110, 40)) as pilot:
            await until(pilot, lambda: stalled(app), timeout=120)
            await sees(pilot, app, "stall  !")
            await pilot.press("f")
            await sees(pilot, app, "WARNING  stall: no step has finished for")
            text = screen_text(app)
            assert f"stall:{stall.popen.pid}" in text and "main thread in" in text
            assert "Thread MainThread" in text and "fix: Read the main thread's stack" in text
            assert "wait_for_the_loader()" in text, text  # the main thread's stack comes first
            assert app.snapshot is not None
            detail = next(f.detail for j in app.snapshot.jobs for f in j.findings if f.detail)
            last = detail.strip().splitlines()[-1].strip()  # the last thread's innermost line
            scroll = app.query_one("#findings-scroll", VerticalScroll)
            await pilot.press("end")
            await until(pilot, lambda: scroll.scroll_y > 0)
            await sees(pilot, app, last[:60])
            await pilot.press("q")

    try:
        asyncio.run(scenario())
    finally:
        (tmp_path / "stall.stop").touch()
        stall.stop()
        daemon.stop()
