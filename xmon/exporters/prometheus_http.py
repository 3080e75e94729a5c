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
import http.client
import io
import logging
import re
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
# RFC 9110: a method is a token, case-sensitive; the target has no spaces or control bytes.
_REQUEST_LINE = re.compile(
    r"(?P<method>[!#$%&'*+\-.^_`|~0-9A-Za-z]+) (?P<target>[\x21-\x7e]+) HTTP/1\.[01]"
)


class BadRequest(Exception):
    """A request head that is not HTTP/1.x; the message says why (one line)."""


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
        response: Response
        try:
            method, path, headers = parse_request(head)
        except BadRequest as exc:
            method, response = "GET", (400, f"bad request: {exc}\n".encode(), "text/plain", {})
        else:
            loop = asyncio.get_running_loop()
            response = await loop.run_in_executor(self._pool, self._respond, method, path, headers)
        status, body, content_type, extra = response
        writer.write(_head(status, body, content_type, extra))
        if method != "HEAD":
            writer.write(body)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_SECONDS)


def parse_request(head: bytes) -> tuple[str, str, dict[str, str]]:
    """Method, target and headers (names lower-cased) of a request head, read with the
    standard library's header parser (at most 100 headers, as ``http.server``). The request
    line is matched whole: ``GET\\x00``, a lower-case ``get`` or an HTTP/2 preface is no GET."""
    if len(head) > MAX_REQUEST_BYTES:
        raise BadRequest("request head too large")
    line, _, rest = head.partition(b"\r\n")
    match = _REQUEST_LINE.fullmatch(line.decode("latin-1"))
    if match is None:
        raise BadRequest("not an HTTP/1.x request line")
    try:
        message = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException as exc:
        raise BadRequest(str(exc).splitlines()[0] if str(exc) else "bad headers") from None
    if message.defects:
        raise BadRequest("malformed headers")
    headers = {name.lower(): value.strip() for name, value in message.items()}
    return match["method"], match["target"], headers


def _head(status: int, body: bytes, content_type: str, extra: dict[str, str]) -> bytes:
    phrase = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {phrase}", "Server: xmon", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close"]  # fmt: skip
    lines += [f"{name}: {value}" for name, value in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
