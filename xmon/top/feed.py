"""Where ``xmon top`` gets its snapshots: any iterable of snapshots and status changes.

The real source is :class:`DaemonSource` (the daemon's subscribe stream, reconnecting forever);
tests hand the app a queue of constructed snapshots instead. A :class:`FeedThread` runs the
source off the UI thread, because a gRPC stream blocks.
"""

from __future__ import annotations

import inspect
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from xmon.model import Snapshot

RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0


@dataclass(frozen=True)
class FeedStatus:
    """The connection state, shown in the title bar."""

    connected: bool
    message: str


FeedEvent = Snapshot | FeedStatus


class DaemonSource:
    """Snapshots from the daemon; when it is absent or goes away, a status and a retry with
    backoff, so the view recovers by itself when the daemon comes back."""

    def __init__(self, socket_path: Path | None = None) -> None:
        from xmon.wire import paths

        self.socket_path = socket_path or paths.default_socket_path()
        self._closed = threading.Event()
        self._client: object | None = None

    def close(self) -> None:
        """Stop: cancels a stream in progress and wakes a retry wait."""
        self._closed.set()
        client = self._client
        if client is not None:
            client.close()  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[FeedEvent]:
        from xmon.wire.client import DaemonClient, DaemonUnavailable  # grpc: off the UI thread

        delay = RETRY_MIN_SECONDS
        yield FeedStatus(False, f"connecting to the daemon at {self.socket_path}")
        while not self._closed.is_set():
            client = DaemonClient(self.socket_path)
            try:
                for n, snapshot in enumerate(client.subscribe()):
                    if n == 0:
                        # Only a live stream may be closed from another thread: closing the
                        # channel while grpc still polls its state makes grpc raise in its own
                        # thread.
                        self._client = client
                        delay = RETRY_MIN_SECONDS
                        yield FeedStatus(True, f"connected to {self.socket_path}")
                    yield snapshot
            except DaemonUnavailable:
                pass
            finally:
                self._client = None
                client.close()
            if self._closed.is_set():
                return
            yield FeedStatus(False, f"daemon not reachable at {self.socket_path}, retrying")
            self._closed.wait(delay)
            delay = min(RETRY_MAX_SECONDS, delay * 2)


def queue_source(events: queue.Queue[FeedEvent | None]) -> Iterator[FeedEvent]:
    """Events put on a queue, until ``None``: how tests feed constructed snapshots."""
    while True:
        event = events.get()
        if event is None:
            return
        yield event


class FeedThread:
    """Iterates a source in a daemon thread and hands each event to ``deliver`` (which must be
    thread-safe, e.g. textual's ``post_message``); stops when ``deliver`` returns False."""

    def __init__(self, source: Iterable[FeedEvent], deliver: Callable[[FeedEvent], bool]) -> None:
        self.source = source
        self._deliver = deliver
        self._thread = threading.Thread(target=self._run, name="xmon-top-feed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Closes a closable source (DaemonSource); a generator cannot be closed from another
        thread while it runs, and dies with the (daemon) thread instead."""
        close = getattr(self.source, "close", None)
        if callable(close) and not inspect.isgenerator(self.source):
            close()

    def _run(self) -> None:
        try:
            for event in self.source:
                if not self._deliver(event):
                    return
        except Exception as exc:  # noqa: BLE001 - shown in the UI rather than lost in a thread
            self._deliver_quietly(FeedStatus(False, f"snapshot feed failed: {exc}"))

    def _deliver_quietly(self, event: FeedEvent) -> None:
        try:
            self._deliver(event)
        except RuntimeError:  # the app's loop has closed: nobody is left to tell
            pass
