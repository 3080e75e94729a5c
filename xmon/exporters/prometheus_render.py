"""When to render /metrics, so a scrape is served from ready bytes without rendering every tick.

Rendering prometheus_client's text exposition costs ~10 µs per series (≈100 ms at 10k series on
a small VM), too slow to do inside a scrape at that size, and wasteful to do on every 1 s tick
when Prometheus scrapes every 15 s. :class:`ScrapeRhythm` learns the scrape interval; the
endpoint pre-renders a new snapshot in the background only when a scrape is due before the next
snapshot, and a scrape that arrives while the newest snapshot is still rendering is served the
previous one (at most one period old) instead of waiting.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable

MIN_GAP_SECONDS = 0.05  # closer scrapes are concurrent scrapers, not a rhythm
FORGET_AFTER_INTERVALS = 4  # no scrape for this many intervals: nobody is scraping any more


class ScrapeRhythm:
    """Running estimate of the time between scrapes (exponentially weighted)."""

    def __init__(self, weight: float = 0.3) -> None:
        self._weight = weight
        self.last: float | None = None
        self.interval: float | None = None

    def observe(self, now: float) -> None:
        if self.last is not None:
            gap = now - self.last
            if gap < MIN_GAP_SECONDS:
                return
            if self.interval is None:
                self.interval = gap
            else:
                self.interval += self._weight * (gap - self.interval)
        self.last = now

    def due_within(self, now: float, horizon: float) -> bool:
        """Is a scrape expected in the next ``horizon`` seconds (or overdue, but still alive)?"""
        if self.last is None or self.interval is None:
            # No rhythm yet: the next scrape renders on demand and teaches the interval. A
            # one-off `curl` must not make the daemon render every tick from then on.
            return False
        if now - self.last > FORGET_AFTER_INTERVALS * self.interval:
            return False
        return self.last + self.interval - now <= horizon


class Rendered:
    """One snapshot's exposition and its gzip copy, each made at most once.

    ``fresh`` is false for a snapshot whose collectors re-served older readings because nobody
    was expected to read it (see ``CollectContext.live``): a scrape then waits for a fresh one.
    """

    def __init__(self, render: Callable[[], bytes], fresh: bool = True) -> None:
        self._render = render
        self.fresh = fresh
        self._text: bytes | None = None
        self._gzip: bytes | None = None
        self._lock = threading.Lock()  # concurrent scrapes wait for one render
        self.failed = False  # a render raised: scrapes must see the error, not older bytes

    @property
    def ready(self) -> bool:
        return self._text is not None

    def text(self) -> bytes:
        with self._lock:
            if self._text is None:
                try:
                    self._text = self._render()
                except Exception:
                    self.failed = True
                    raise
                # The render holds its snapshot (thousands of programs, for a large job); a
                # Rendered kept as the previous one must not keep that alive too.
                self._render = _spent
            return self._text

    def gzipped(self) -> bytes:
        text = self.text()
        with self._lock:
            if self._gzip is None:
                # Level 1: ~20x cheaper than the default 9 for a body ~2.5x larger.
                self._gzip = gzip.compress(text, compresslevel=1)
            return self._gzip


def _spent() -> bytes:
    raise AssertionError("rendered once already")


class BackgroundRenderer:
    """One worker thread rendering the most recently requested snapshot (older ones skipped)."""

    def __init__(self) -> None:
        self._wanted: tuple[Rendered, bool] | None = None
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def request(self, rendered: Rendered, with_gzip: bool) -> None:
        with self._wake:
            self._wanted = (rendered, with_gzip)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="xmon-metrics-render", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self._wanted is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                rendered, with_gzip = self._wanted  # type: ignore[misc]
                self._wanted = None
            try:
                rendered.gzipped() if with_gzip else rendered.text()
            except Exception:  # noqa: BLE001 - the scrape that needs it renders and reports
                pass
