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

import contextlib
import errno
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

import xmon
from xmon.model import Snapshot

from .prometheus_families import DEFAULT_PROGRAM_LIMIT, bootstrap_families, snapshot_families
from .prometheus_render import BackgroundRenderer, Rendered, ScrapeRhythm
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
        self, program_limit: int = DEFAULT_PROGRAM_LIMIT, snapshot: Snapshot | None = None
    ) -> None:
        self.program_limit = program_limit
        self._snapshot = snapshot

    def set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def collect(self) -> list[Metric]:  # type: ignore[override]
        snapshot = self._snapshot
        if snapshot is None:
            return bootstrap_families(xmon.__version__)
        return snapshot_families(snapshot, self.program_limit)

    def describe(self) -> list[Metric]:  # type: ignore[override]
        return []  # registering must not collect


class MetricsEndpoint:
    """Serves the latest snapshot on ``GET /metrics``, rendered at most once per snapshot."""

    def __init__(
        self,
        program_limit: int = DEFAULT_PROGRAM_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.program_limit = program_limit
        self._clock = clock
        # For embedding (e.g. prometheus_client.write_to_textfile(path, endpoint.registry)).
        # Private, so no python_*/GC metrics; the daemon's process_* come with every scrape.
        self.collector = SnapshotCollector(program_limit)
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
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _new_rendered(self, snapshot: Snapshot | None, fresh: bool = True) -> Rendered:
        # Each snapshot gets its own collector, so a render in flight for an older one can
        # never mix two snapshots.
        collector = SnapshotCollector(self.program_limit, snapshot)
        own = self.self_metrics
        return Rendered(lambda: generate_latest(collector) + own.render(), fresh)

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
        self._server = _bind(host, port, self)
        self._thread = threading.Thread(
            target=_serve_until_closed, args=(self._server,), name="xmon-metrics-http", daemon=True
        )
        self._thread.start()
        return self.address

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise MetricsServerError("the metrics server is not running")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    def stop(self) -> None:
        self._renderer.close()
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.closing = True
            with contextlib.suppress(OSError):  # wakes the accept loop at once
                server.socket.shutdown(socket.SHUT_RDWR)
        if thread is not None:
            thread.join()
        if server is not None:
            server.server_close()


# --- HTTP ------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    timeout = None  # handle_request() blocks until a connection comes or the socket shuts down

    def __init__(self, address: tuple[str, int], endpoint: MetricsEndpoint) -> None:
        self.endpoint = endpoint
        self.closing = False
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer's own asks DNS for the host's full name (socket.getfqdn), which stalls
        # start-up on a host with slow reverse DNS, for a name only CGI scripts would use.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


def _serve_until_closed(server: _Server) -> None:
    """Accept until ``stop()``. Unlike ``serve_forever`` this does not wake to poll a flag
    (4 wakeups a second at its 0.25 s interval, a daemon's whole idle cost): ``stop()`` shuts
    the listening socket down, which wakes the blocked accept."""
    while not server.closing:
        server.handle_request()


class _Server6(_Server):
    address_family = socket.AF_INET6


def _bind(host: str, port: int, endpoint: MetricsEndpoint) -> _Server:
    server_class = _Server6 if ":" in host else _Server
    try:
        return server_class((host, port), endpoint)
    except OSError as e:
        raise MetricsServerError(_bind_error(host, port, e)) from e


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


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "xmon"
    timeout = 10  # a stalled client must not hold a thread forever

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def __getattr__(self, name: str) -> Callable[[], None]:
        # The base class answers unknown methods with 501 "not implemented"; this endpoint is
        # read-only by design, so every method other than GET and HEAD is "not allowed".
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self.close_connection = True  # the request body, if any, is never read
        self._send(405, b"method not allowed\n", _TEXT, headers={"Allow": "GET, HEAD"})

    def _route(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._metrics(head)
        elif path == "/":
            self._send(200, _LANDING, "text/html; charset=utf-8", head)
        elif path == "/-/healthy":
            self._send(200, b"OK", _TEXT, head)
        else:
            self._send(404, b"not found\n", _TEXT, head)

    def _metrics(self, head: bool) -> None:
        gz = _accepts_gzip(self.headers.get("Accept-Encoding"))
        try:
            body = self.server.endpoint.body(accept_gzip=gz)
        except Exception:  # a bug in rendering: fail this scrape (Prometheus' up = 0), keep serving
            log.exception("rendering /metrics failed")
            self._send(500, b"rendering metrics failed\n", _TEXT, head)
            return
        headers = {"Vary": "Accept-Encoding"} | ({"Content-Encoding": "gzip"} if gz else {})
        self._send(200, body, CONTENT_TYPE, head, headers)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        head: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)  # no stderr line per scrape
