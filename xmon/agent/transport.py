"""The agent's connection to the daemon: one gRPC stream, a bounded queue, reconnect forever.

The job must never wait for xmon. Reports are offered without blocking; when the daemon is
absent, restarting or not reading, reports are dropped and counted (all counters in a report
are cumulative, so a dropped report loses detail, not totals). The stream runs on its own
threads and reconnects with capped exponential backoff.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from xmon.agent.proof import show_token
from xmon.wire import paths
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
from xmon.wire.protocol import in_parts

log = logging.getLogger("xmon.agent")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass
class Outgoing:
    message: xmon_pb2.AgentMessage
    on_sent: Callable[[], None] | None = None


@dataclass
class TransportCounters:
    reports_sent: int = 0
    reports_dropped: int = 0
    reconnects: int = 0
    connects: int = 0
    last_error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


class Transport:
    def __init__(
        self,
        target: str,
        hello: Callable[[], xmon_pb2.AgentMessage],
        on_command: Callable[[xmon_pb2.DaemonCommand], None],
        max_queue: int = 16,
        backoff: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        self._target = target
        self._hello = hello
        self._on_command = on_command
        # Each stream has a queue of its own: the request iterator of a stream that ended may
        # still wait on its queue in gRPC's thread, and must not take what the next one sends.
        self._max_queue = max_queue
        self._queue: queue.Queue[Outgoing | None] = queue.Queue(maxsize=max_queue)
        self._backoff = backoff
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._call: grpc.Future | None = None
        self._grpc_threads: list[threading.Thread] = []  # gRPC's helpers for our stream
        self._part_bytes = 0  # larger messages go in parts (the daemon's welcome says; 0: never)
        self._restore_name: Callable[[], None] | None = None  # after a pid proof
        self.counters = TransportCounters()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="xmon-transport", daemon=True)
        self._thread.start()

    def offer(self, item: Outgoing) -> bool:
        """Queue a message for the daemon without ever blocking; False if it was dropped."""
        if not self._connected.is_set():
            self.counters.add("reports_dropped")
            return False
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            pass
        try:  # the daemon is not keeping up: the newest report is worth more than the oldest
            self._queue.get_nowait()
            self.counters.add("reports_dropped")
        except queue.Empty:
            pass
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            self.counters.add("reports_dropped")
            return False

    def flush(self, timeout: float) -> bool:
        """Wait (bounded) until queued messages were handed to gRPC."""
        deadline = threading.Event()
        step = 0.01
        waited = 0.0
        while self._connected.is_set() and not self._queue.empty() and waited < timeout:
            deadline.wait(step)
            waited += step
        return self._queue.empty()

    def stop(self, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        self._stop.set()
        self._wake_request_iterator()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        # gRPC serves a stream with helper threads of its own (request consumer, channel spin).
        # One still running when the interpreter finalises is killed inside C++ code, which
        # aborts the process ("FATAL: exception not rethrown"); let them finish first.
        for thread in self._grpc_threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- stream thread -----------------------------------------------------------------------
    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            connected_before = self.counters.connects
            self._run_one_stream()
            if self.counters.connects > connected_before:
                delay = self._backoff[0]  # it worked for a while: retry fast
            if self._stop.wait(delay):
                break
            delay = min(delay * 2, self._backoff[1])

    def _untrusted(self) -> bool:
        """Whether the socket may belong to someone else (checked before each connect): a
        listener planted by another user would read the job's hello and send it commands."""
        if not self._target.startswith("unix://"):
            return False
        problem = paths.socket_problem(Path(self._target.removeprefix("unix://")))
        if problem is None:
            return False
        message = f"not connecting to an untrusted socket: {problem}"
        if message != self.counters.last_error:
            log.warning("xmon: %s", message)
        self.counters.last_error = message
        return True

    def _run_one_stream(self) -> None:
        if self._untrusted():
            return
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        before = set(threading.enumerate())  # to tell gRPC's helpers for this stream apart
        channel = grpc.insecure_channel(self._target, options=options)
        try:
            grpc.channel_ready_future(channel).result(timeout=1.0)
            stub = xmon_pb2_grpc.IngestStub(channel)
            self._queue = queue.Queue(maxsize=self._max_queue)
            call = stub.Connect(self._requests(self._queue))
            self._call = call
            self._note_grpc_threads(before)
            for message in call:
                self._handle(message)
        except grpc.FutureTimeoutError:
            self.counters.last_error = "daemon not reachable"
        except grpc.RpcError as exc:
            self.counters.last_error = f"{exc.code().name}: {exc.details()}"
        except Exception as exc:  # noqa: BLE001 - the job must never see this
            self.counters.last_error = repr(exc)
        finally:
            self._note_grpc_threads(before)
            self._disconnect()
            channel.close()

    def _note_grpc_threads(self, before: set[threading.Thread]) -> None:
        started = [t for t in threading.enumerate() if t not in before and _is_grpc_helper(t)]
        self._grpc_threads = [t for t in self._grpc_threads if t.is_alive()] + [
            t for t in started if t not in self._grpc_threads
        ]

    def _handle(self, message: xmon_pb2.DaemonMessage) -> None:
        kind = message.WhichOneof("kind")
        if kind == "prove":
            self._prove(message.prove.token)
        elif kind == "welcome":
            self._name_back()
            self._part_bytes = message.welcome.max_part_bytes
            if self.counters.connects:
                self.counters.add("reconnects")
            self.counters.add("connects")
            self._connected.set()
            log.debug("xmon: connected to daemon %s", message.welcome.daemon_version)
        elif kind == "command":
            self._on_command(message.command)

    def _prove(self, token: str) -> None:
        """Show the daemon's token as this (the stream) thread's name until the welcome: only
        this process can, so the daemon knows the pid this stream claims is its own."""
        self._name_back()
        self._restore_name = show_token(token)
        shown = xmon_pb2.AgentMessage(shown=xmon_pb2.ProcessShown(token=token))
        try:
            self._queue.put_nowait(Outgoing(shown))
        except queue.Full:
            pass  # not connected yet, so nothing else is queued

    def _name_back(self) -> None:
        restore, self._restore_name = self._restore_name, None
        if restore is not None:
            restore()

    def _disconnect(self) -> None:
        self._name_back()
        was_connected = self._connected.is_set()
        self._connected.clear()
        self._call = None
        dropped = 0
        while True:
            try:
                if self._queue.get_nowait() is not None:
                    dropped += 1
            except queue.Empty:
                break
        if dropped:
            self.counters.add("reports_dropped", dropped)
        self._wake_request_iterator()  # the ended stream's iterator returns
        self._queue = queue.Queue(maxsize=self._max_queue)  # and nothing is left queued
        if was_connected:
            log.debug("xmon: lost the daemon (%s); reconnecting", self.counters.last_error)

    def _wake_request_iterator(self) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass

    def _requests(self, outbox: queue.Queue[Outgoing | None]) -> Iterator[xmon_pb2.AgentMessage]:
        """The stream's messages: the hello, then what is queued for this stream only (after a
        reconnect, the ended stream's iterator took a pid proof meant for the new one, and the
        daemon refused the new stream)."""
        yield self._hello()
        while not self._stop.is_set():
            try:
                item = outbox.get(timeout=0.25)
            except queue.Empty:
                if outbox is not self._queue:
                    return  # a newer stream has its own queue
                if self._call is not None and not self._call.is_active():
                    return
                continue
            if item is None:
                return
            yield from in_parts(item.message, self._part_bytes)
            if item.message.HasField("report"):
                self.counters.add("reports_sent")
            if item.on_sent is not None:
                item.on_sent()


def _is_grpc_helper(thread: threading.Thread) -> bool:
    target = getattr(thread, "_target", None)
    return "_run_with_context" in getattr(target, "__qualname__", "")
