"""The terminal view in-process on a fed queue (textual's pilot), and what its screen shows."""

from __future__ import annotations

import io
import queue
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from rich.console import Console
from textual.pilot import Pilot

from xmon.model import Snapshot
from xmon.top.app import XmonTop
from xmon.top.feed import FeedEvent, queue_source

Events = queue.Queue[FeedEvent | None]


def screen_text(app: XmonTop) -> str:
    """What the terminal shows, as plain text (the same render export_screenshot uses)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      force_terminal=True, legacy_windows=False)  # fmt: skip
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


async def until(pilot: Pilot[Any], check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {check}")
        await pilot.pause(0.02)
    return value


async def sees(pilot: Pilot[Any], app: XmonTop, text: str) -> None:
    """Wait until ``text`` is on screen (a widget update is drawn on the next refresh)."""
    await until(pilot, lambda: text in screen_text(app))


@asynccontextmanager
async def top(
    *events: FeedEvent,
    size: tuple[int, int] = (120, 36),
    capture: Callable[[int], str] | None = None,
) -> AsyncIterator[tuple[XmonTop, Pilot[Any], Events]]:
    feed: Events = queue.Queue()
    for event in events:
        feed.put(event)
    app = XmonTop(queue_source(feed), capture=capture, refresh_seconds=0.05)
    async with app.run_test(size=size, notifications=True) as pilot:
        last = [e for e in events if isinstance(e, Snapshot)]
        if last:
            await until(
                pilot, lambda: app.snapshot is not None and app.snapshot.seq == last[-1].seq
            )
        yield app, pilot, feed
        feed.put(None)
