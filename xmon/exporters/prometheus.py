"""Prometheus exporter: the latest snapshot as text exposition on a read-only HTTP endpoint.

The daemon calls :meth:`MetricsEndpoint.update` with every snapshot. A snapshot is rendered at
most once (and gzip-compressed at most once), every later scrape is served from those bytes, and
none sees a half-updated snapshot. When scrapes come regularly, the snapshot a scrape will want
is rendered ahead of it in the background (see prometheus_render), so scrape latency does not
grow with the number of series.

    endpoint = MetricsEndpoint(program_limit=50)
    endpoint.start("127.0.0.1", port)
    endpoint.update(snapshot)  # every tick
    endpoint.stop()
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

import xmon
from xmon.model import Snapshot

from .prometheus_families import DEFAULT_PROGRAM_LIMIT, bootstrap_families, snapshot_families
from .prometheus_http import HttpServer, Response, listen_socket
from .prometheus_programs import ProgramSeriesCache
from .prometheus_render import BackgroundRenderer, Rendered, ScrapeRhythm
from .prometheus_text import exposition
from .self_metrics import SelfMetrics

__all__ = [
    "CONTENT_TYPE",
    "MetricsEndpoint",
    "MetricsServerError",
    "SnapshotCollector",
    "snapshot_families",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FRESH_WAIT_MAX_SECONDS = 5.0  # a scrape of a stale snapshot waits at most this for a fresh one
_TEXT = "text/plain; charset=utf-8"
_LANDING = b"""<!DOCTYPE html>
<html><head><title>xmon</title></head>
<body><h1>xmon</h1><p>PJRT device monitor for JAX jobs.</p>
<p><a href="/metrics">Metrics</a></p></body></html>
"""


class MetricsServerError(RuntimeError):
    """The /metrics HTTP server could not start."""


class SnapshotCollector(Collector):
    """A prometheus_client collector that yields the families of the latest snapshot."""

    def __init__(
        self,
        program_limit: int = DEFAULT_PROGRAM_LIMIT,
        snapshot: Snapshot | None = None,
        programs: ProgramSeriesCache | None = None,
    ) -> None:
        self.program_limit = program_limit
        self._snapshot = snapshot
        self._programs = programs

    def set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> list[Metric]:  # type: ignore[override]
        snapshot = self._snapshot
        if snapshot is None:
            return bootstrap_families(xmon.__version__)
        return snapshot_families(snapshot, self.program_limit, self._programs)

    def describe(self) -> list[Metric]:  # type: ignore[override]
        return []  # registering must not collect


class MetricsEndpoint:
    """Serves the latest snapshot on ``GET /metrics``, rendered at most once per snapshot."""

    def __init__(
        self,
        program_limit: int = DEFAULT_PROGRAM_LIMIT,
        clock: Callable[[], float] = time.monotonic,
        max_connections: int = 512,
    ) -> None:
        self.program_limit = program_limit
        self.max_connections = max_connections
        self._clock = clock
        # For embedding (e.g. prometheus_client.write_to_textfile(path, endpoint.registry)).
        # Private, so no python_*/GC metrics; the daemon's process_* come with every scrape.
        self.collector = SnapshotCollector(program_limit)
        self._program_series = ProgramSeriesCache()  # shared by the renders of every snapshot
        self.self_metrics = SelfMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._rendered = self._new_rendered(None)
        self._previous: Rendered | None = None  # the last fresh one that was rendered
        self._changed = threading.Condition()  # a scrape waiting for a fresh snapshot
        self._stale_scraped = False  # ... asks the daemon to read its collectors next tick
        self._background: Rendered | None = None  # the render handed to the renderer
        self._rhythm = ScrapeRhythm()
        self._renderer = BackgroundRenderer()
        self._wants_gzip = False
        self._last_update: float | None = None
        self._period = 1.0
        self._server: HttpServer | None = None

    def _new_rendered(self, snapshot: Snapshot | None, fresh: bool = True) -> Rendered:
        # Each snapshot gets its own collector, so a render in flight for an older one can
        # never mix two snapshots.
        collector = SnapshotCollector(self.program_limit, snapshot, self._program_series)
        own = self.self_metrics
        return Rendered(lambda: exposition(collector) + own.render(), fresh)

    def update(self, snapshot: Snapshot, fresh: bool = True) -> None:
        """Publish ``snapshot``. Rendered now in the background if a scrape is due before the
        next update, else by the first scrape that wants it. ``fresh`` false: its collectors
        re-served older readings (nobody was expected to read it), so no scrape is served it.
        """
        now = self._clock()
        if self._last_update is not None:
            self._period = max(0.01, now - self._last_update)
        self._last_update = now
        self.collector.set_snapshot(snapshot)
        self._program_series.keep(snapshot.jobs)
        with self._changed:
            if self._rendered.ready and self._rendered.fresh:
                self._previous = self._rendered
            self._rendered = self._new_rendered(snapshot, fresh)
            if fresh:
                self._stale_scraped = False
                self._changed.notify_all()
        if fresh and self._rhythm.due_within(now, horizon=1.5 * self._period):
            self._background = self._rendered
            self._renderer.request(self._rendered, self._wants_gzip)

    def scrape_due(self) -> bool:
        """Will a scrape read the snapshot the daemon is about to build: one is due before the
        next, or one is waiting because the latest was not fresh?"""
        # A quarter period of slack for the scraper's jitter: a scrape that still comes early
        # finds the snapshot not fresh and waits for the next tick (see body()).
        return self._stale_scraped or self._rhythm.due_within(
            self._clock(), horizon=1.25 * self._period
        )

    def body(self, accept_gzip: bool = False) -> bytes:
        """The exposition of the latest fresh snapshot (gzip-compressed if asked).

        If the newest snapshot is still being rendered, the previous one (at most one period
        older) is served rather than making the scrape wait for the render. If it is not fresh
        (no scrape was expected, e.g. a one-off ``curl``), the scrape waits for the next tick,
        which then reads every collector."""
        self._rhythm.observe(self._clock())
        self._wants_gzip = accept_gzip
        rendered = self._rendered  # one read: text and gzip copy of the same snapshot
        if not rendered.fresh:
            rendered = self._wait_for_fresh()
        previous = self._previous
        # Only a render already under way is worth not waiting for; one nobody started is
        # made by this scrape, else its snapshot would never be served.
        in_flight = rendered is self._background and not rendered.ready and not rendered.failed
        if in_flight and previous is not None:
            rendered = previous
        return rendered.gzipped() if accept_gzip else rendered.text()

    def _wait_for_fresh(self) -> Rendered:
        """The next fresh snapshot; the stale one if the daemon makes none in time (its
        collectors hung): readings a few periods old beat a failed scrape."""
        deadline = time.monotonic() + min(FRESH_WAIT_MAX_SECONDS, 2.0 * self._period + 1.0)
        with self._changed:
            self._stale_scraped = True
            while not self._rendered.fresh and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return self._rendered

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Serve on ``host:port`` (port 0: any free port) from a daemon thread.

        Returns the bound address. Raises MetricsServerError when it cannot listen."""
        if self._server is not None:
            raise MetricsServerError("the metrics server is already running")
        try:
            sock = listen_socket(host, port)
        except OSError as e:
            raise MetricsServerError(_bind_error(host, port, e)) from e
        self._server = HttpServer(sock, self.respond, self.max_connections)
        self._server.start()
        return self.address

    @property
    def refused(self) -> Counter[str]:
        """Connections the HTTP server closed at its bounds (by bound name)."""
        return self._server.refused if self._server is not None else Counter()

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise MetricsServerError("the metrics server is not running")
        host, port = self._server.socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    def stop(self) -> None:
        self._renderer.close()
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def respond(self, method: str, path: str, headers: dict[str, str]) -> Response:
        """The answer to one HTTP request (called from the server's worker threads)."""
        if method not in ("GET", "HEAD"):
            # read-only by design: every other method is "not allowed" (not "not implemented")
            return 405, b"method not allowed\n", _TEXT, {"Allow": "GET, HEAD"}
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return self._metrics(headers.get("accept-encoding"))
        if path == "/":
            return 200, _LANDING, "text/html; charset=utf-8", {}
        if path == "/-/healthy":
            return 200, b"OK", _TEXT, {}
        return 404, b"not found\n", _TEXT, {}

    def _metrics(self, accept_encoding: str | None) -> Response:
        gz = _accepts_gzip(accept_encoding)
        try:
            body = self.body(accept_gzip=gz)
        except Exception:  # a bug in rendering: fail this scrape (Prometheus' up = 0), keep serving
            log.exception("rendering /metrics failed")
            return 500, b"rendering metrics failed\n", _TEXT, {}
        headers = {"Vary": "Accept-Encoding"} | ({"Content-Encoding": "gzip"} if gz else {})
        return 200, body, CONTENT_TYPE, headers


# --- HTTP ------------------------------------------------------------------------------------


def _bind_error(host: str, port: int, error: OSError) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
    if error.errno == errno.EADDRINUSE:
        reason = "address already in use (another xmon daemon? use --listen)"
    elif error.errno == errno.EACCES:
        reason = "permission denied (ports below 1024 need privileges)"
    elif error.errno == errno.EADDRNOTAVAIL:
        reason = "address not available on this host"
    elif isinstance(error, socket.gaierror):
        reason = f"cannot resolve host {host!r}"
    else:
        reason = (error.strerror or str(error)).lower()
    return f"cannot listen on {where}: {reason}"


def _accepts_gzip(header: str | None) -> bool:
    for item in (header or "").split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() == "gzip":
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False
