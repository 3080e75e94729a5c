"""The /metrics HTTP server: many concurrent scrapers, bounded threads, slow clients cut off.

One thread runs an asyncio loop that accepts connections and reads requests (a connection that
has not sent its request costs a descriptor and a buffer, never a thread); complete requests are
answered from a small pool of worker threads (the rendered exposition is cached, so a worker
holds no lock for long). Bounds: ``max_connections`` open connections (past it the connection
waiting longest for its request is closed), ``REQUEST_TIMEOUT_SECONDS`` to send the request,
``WRITE_TIMEOUT_SECONDS`` to take the response, a listen backlog of ``BACKLOG``. One request per
connection (``Connection: close``), as the standard library's server did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

log = logging.getLogger("xmon.exporters.prometheus")

BACKLOG = 1024  # the kernel caps it at net.core.somaxconn (4096 on current kernels)
WORKERS = 4
REQUEST_TIMEOUT_SECONDS = 5.0
WRITE_TIMEOUT_SECONDS = 10.0
MAX_REQUEST_BYTES = 16 * 1024

# (status, body, content type, extra headers) for a request's method, path and headers
Response = tuple[int, bytes, str, dict[str, str]]
Responder = Callable[[str, str, dict[str, str]], Response]


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (raises OSError, for the caller to word)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves ``respond(method, path, headers)`` on a listening socket until ``stop()``."""

    def __init__(self, sock: socket.socket, respond: Responder, max_connections: int) -> None:
        self.socket = sock
        self.max_connections = max_connections
        self.refused: Counter[str] = Counter()
        self._respond = respond
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="xmon-metrics-worker")
        self._loop = asyncio.new_event_loop()
        self._reading: dict[asyncio.Task[None], float] = {}  # connection -> accepted at
        self._open: set[asyncio.Task[None]] = set()
        self._stopped: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xmon-metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def stop(self) -> None:
        if self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.socket.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(
            self._accept, sock=self.socket, backlog=BACKLOG, limit=MAX_REQUEST_BYTES
        )
        self._started.set()
        async with server:
            await self._stopped.wait()
            for task in list(self._open):
                task.cancel()
            await asyncio.gather(*self._open, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._open) >= self.max_connections and not self._evict_oldest_reader():
            self.refused["metrics_connections"] += 1
            writer.transport.abort()
            return
        self._open.add(task)
        self._reading[task] = time.monotonic()
        try:
            await self._serve(task, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away or sent nonsense: nothing to answer
        except TimeoutError:
            self.refused["metrics_timeouts"] += 1
        finally:
            self._open.discard(task)
            self._reading.pop(task, None)
            writer.transport.abort()

    def _evict_oldest_reader(self) -> bool:
        """Make room by closing the connection that has waited longest for its request."""
        if not self._reading:
            return False
        oldest = min(self._reading, key=self._reading.__getitem__)
        del self._reading[oldest]
        oldest.cancel()
        self._open.discard(oldest)
        self.refused["metrics_connections"] += 1
        return True

    async def _serve(
        self, task: asyncio.Task[None], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_SECONDS)
        self._reading.pop(task, None)
        method, path, headers = _parse(head)
        loop = asyncio.get_running_loop()
        status, body, content_type, extra = await loop.run_in_executor(
            self._pool, self._respond, method, path, headers
        )
        writer.write(_head(status, body, content_type, extra))
        if method != "HEAD":
            writer.write(body)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_SECONDS)


def _parse(head: bytes) -> tuple[str, str, dict[str, str]]:
    if len(head) > MAX_REQUEST_BYTES:
        raise ConnectionError("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3:
        raise ConnectionError("not an HTTP request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return parts[0].upper(), parts[1], headers


def _head(status: int, body: bytes, content_type: str, extra: dict[str, str]) -> bytes:
    phrase = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {phrase}", "Server: xmon", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close"]  # fmt: skip
    lines += [f"{name}: {value}" for name, value in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
