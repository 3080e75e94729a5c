"""Hostile and buggy clients of a real daemon: the floods of docs/reliability.md.

Shared by the flood tests (tests/faults/) and the flood benchmark (benchmarks/floods.py). Each
attack stays on this machine (the daemon's unix socket, 127.0.0.1) and is bounded in count.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import grpc

from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc
from xmon.wire.proto import xplane_pb2 as xp
from xmon.wire.protocol import PART_BYTES, in_parts

from support.procs import Daemon, start_daemon

REFUSED = re.compile(r'^xmon_daemon_refused_total\{bound="([^"]+)"\} (\S+)$', re.MULTILINE)


def config_daemon(workdir: Path, config: str = "", **kwargs: object) -> Daemon:
    """A real daemon started with ``config`` as its TOML file. The floods claim made-up pids
    (a live process may hold one), so it checks no pid claims unless ``config`` says so."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "xmon.toml"
    path.write_text(config if "verify_pids" in config else f'verify_pids = "off"\n{config}')
    return start_daemon(workdir / "d", extra_args=["--config", str(path)], **kwargs)  # type: ignore[arg-type]


def scrape_seconds(url: str, timeout: float = 30.0) -> float:
    """Seconds one whole ``GET`` of ``url`` takes."""
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        response.read()
    return time.monotonic() - started


def series_value(daemon: Daemon, series: str) -> float:
    for line in daemon.scrape().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def refused(metrics_text: str) -> dict[str, float]:
    """``xmon_daemon_refused_total`` by bound, from a /metrics page."""
    return {bound: float(value) for bound, value in REFUSED.findall(metrics_text)}


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def padded(message: bytes, padding: int) -> bytes:
    """The message with an unknown length-delimited field (number 1000) of ``padding`` bytes."""
    tag = (1000 << 3) | 2
    return message + varint(tag) + varint(padding) + b"\0" * padding


def padded_message(message: bytes, kind: str, padding: int) -> bytes:
    """An AgentMessage whose inner hello or report carries ``padding`` unknown bytes."""
    parsed = xmon_pb2.AgentMessage.FromString(message)
    inner = padded(getattr(parsed, kind).SerializeToString(), padding)
    number = {"hello": 1, "report": 2}[kind]
    return bytes([(number << 3) | 2]) + varint(len(inner)) + inner


def in_part_frames(message: bytes) -> list[bytes]:
    """An encoded AgentMessage as an agent sends it: whole, or in parts when it is larger than
    the daemon takes in one message (xmon.wire.protocol.in_parts)."""
    parts = in_parts(xmon_pb2.AgentMessage.FromString(message), PART_BYTES)
    return [part.SerializeToString() for part in parts]


def hello(pid: int, devices: int = 0, padding: int = 0) -> bytes:
    """An AgentMessage carrying a hello with ``devices`` devices, padded if asked."""
    message = xmon_pb2.AgentHello(
        protocol_version=1, job_name=f"flood{pid}", pid=pid, platform="cpu",
        devices=[xmon_pb2.DeviceInfo(id=i, platform="cpu") for i in range(devices)],
    )  # fmt: skip
    encoded = xmon_pb2.AgentMessage(hello=message).SerializeToString()
    return padded_message(encoded, "hello", padding) if padding else encoded


def report(
    programs: int = 0, padding: int = 0, memory_devices: int = 0, seq: int = 1, devices: int = 0
) -> bytes:
    """An AgentMessage carrying a report that announces ``programs`` programs and ``devices``
    devices (and memory readings of ``memory_devices`` devices). One larger than the daemon's
    receive limit is sent as an agent sends it: ``in_part_frames``."""
    message = xmon_pb2.AgentReport(
        seq=seq,
        devices=[xmon_pb2.DeviceInfo(id=i, platform="cpu") for i in range(devices)],
        memory=[
            xmon_pb2.DeviceMemorySample(
                device_id=i, stats={"bytes_in_use": seq * 1024 + i, "bytes_limit": 1 << 34}
            )
            for i in range(memory_devices)
        ],
        programs=[
            xmon_pb2.ProgramInfo(fingerprint=f"{i:064x}", name=f"jit_{i}", compiled_at=i + 1.0)
            for i in range(programs)
        ],
    )
    encoded = xmon_pb2.AgentMessage(report=message).SerializeToString()
    return padded_message(encoded, "report", padding) if padding else encoded


PS_PER_MS = 10**9


def _cpu_plane(events: Iterable[tuple[int, int, int, int]]) -> xp.XPlane:
    """The CPU backend's plane with one device op per ``(program, run, device, start_ps)``."""
    plane = xp.XPlane(name="/host:CPU")
    for key, name in enumerate(("program_id", "run_id", "device_ordinal", "hlo_op"), 1):
        plane.stat_metadata[key].CopyFrom(xp.XStatMetadata(id=key, name=name))
    line = plane.lines.add(name="tf_XLAPjRtCpuClient/1")
    for program, run, device, start in events:
        line.events.add(offset_ps=start, duration_ps=PS_PER_MS, stats=[
            xp.XStat(metadata_id=1, int64_value=program),
            xp.XStat(metadata_id=2, int64_value=run),
            xp.XStat(metadata_id=3, int64_value=device),
            xp.XStat(metadata_id=4, str_value="fusion")])  # fmt: skip
    return plane


def stepping_space(steps: int = 10, period_ms: int = 20) -> bytes:
    """An XSpace of one program run every period on one device: a sample with whole periods."""
    plane = _cpu_plane((7, 1000 + i, 0, i * period_ms * PS_PER_MS) for i in range(steps))
    return xp.XSpace(planes=[plane]).SerializeToString()


def distinct_ids_space(target_bytes: int) -> bytes:
    """An XSpace of about ``target_bytes`` whose every event has its own program, run and
    device: what a parser keeping a table per id holds most of."""
    probe = 10_000  # an event's bytes grow with its offset: measured at a large one
    per_event = len(distinct_ids_plane(probe).SerializeToString()) / probe
    return xp.XSpace(
        planes=[distinct_ids_plane(int(target_bytes / per_event / 1.02))]
    ).SerializeToString()


def distinct_ids_plane(events: int) -> xp.XPlane:
    return _cpu_plane((1 << 40 | i, 1 << 41 | i, 1 << 42 | i, i * 1000) for i in range(events))


def execution_sample(
    xspace: bytes, step_begins: Iterable[float] = (), duration: float = 0.2
) -> bytes:
    """An AgentMessage carrying an execution sample, as the agent's sampler sends it."""
    sample = xmon_pb2.ExecutionSample(
        started_at=time.time() - duration, duration_seconds=duration, xspace=xspace,
        step_begin_seconds=list(step_begins), steps_marked=True,
    )  # fmt: skip
    return xmon_pb2.AgentMessage(execution_sample=sample).SerializeToString()


def samples_every(pid: int, sample: list[bytes], seconds: float) -> Iterator[bytes]:
    """A job's hello, then ``sample`` (its frames) every ``seconds``, until the stream ends."""
    yield hello(pid)
    while True:
        yield from sample
        time.sleep(seconds)


def recompile_report(padding: int) -> bytes:
    """A report whose recompiled function carries ``padding`` characters in each string the
    daemon keeps of it."""
    text = "x" * padding
    row = xmon_pb2.FunctionCompiles(
        name="f" + text, compiles_total=3, changes=[text], arguments=[text], jax_explanation=text
    )
    stall = xmon_pb2.StallReport(seconds_since_step=1.0, stacks=text)
    message = xmon_pb2.AgentReport(seq=1, compile_functions=[row], stall=stall)
    return xmon_pb2.AgentMessage(report=message).SerializeToString()


class RawStream:
    """One Connect stream sending raw frames (a generator may pace them), kept open until
    ``close()``. With ``keepalive``, a report every ``period`` seconds after them keeps the
    job live (a job silent past ``agent_timeout_seconds`` leaves the snapshot)."""

    def __init__(
        self, socket_path: Path, frames: Iterable[bytes], keepalive: float | None = None
    ) -> None:
        self._keepalive = keepalive
        self.channel = grpc.insecure_channel(
            f"unix://{socket_path}", options=[("grpc.max_send_message_length", 64 << 20)]
        )
        self._done = threading.Event()
        connect = self.channel.stream_stream(
            "/xmon.v1.Ingest/Connect",
            request_serializer=lambda b: b,
            response_deserializer=xmon_pb2.DaemonMessage.FromString,
        )
        self.call = connect(self._frames(frames))

    def _frames(self, frames: Iterable[bytes]) -> Iterator[bytes]:
        yield from frames
        seq = 1
        while not self._done.wait(self._keepalive):  # None: wait until closed
            seq += 1
            yield report(seq=seq)

    def close(self) -> None:
        self._done.set()
        self.call.cancel()
        self.channel.close()


class GoodAgent:
    """A well-behaved agent during a flood: its hello, a report, then a report every
    ``keepalive`` seconds, on a stream opened again (every 0.2 s) whenever the daemon or gRPC
    ends it, as the real agent reconnects (xmon.agent.transport): while a flood holds every
    call gRPC allows at once, a new stream is refused before the daemon sees it."""

    def __init__(self, socket_path: Path, pid: int, keepalive: float = 0.5) -> None:
        self._open = lambda: RawStream(socket_path, [hello(pid), report()], keepalive=keepalive)
        self.stream = self._open()
        self.opened = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._reopen, daemon=True)
        self._thread.start()

    def _reopen(self) -> None:
        while not self._stop.wait(0.2):
            if self.stream.call.done():
                self.stream.close()
                self.stream = self._open()
                self.opened += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.stream.close()


class StalledView:
    """A Subscribe stream whose client never asks for a message (a view that stopped reading).

    Without a call to ``next()`` gRPC's client takes bytes off the socket only as far as its
    flow-control windows allow, so the daemon's writes to it stop completing once those fill:
    after ~4 MiB for gRPC's default client, after about ``window`` bytes if given."""

    def __init__(self, socket_path: Path, window: int | None = None) -> None:
        options: list[tuple[str, int]] = [("grpc.max_receive_message_length", 64 << 20)]
        if window is not None:  # the stream's initial window, not grown by BDP probing
            options += [("grpc.http2.lookahead_bytes", window), ("grpc.http2.bdp_probe", 0)]
        self.channel = grpc.insecure_channel(f"unix://{socket_path}", options=options)
        self.call = xmon_pb2_grpc.ControlStub(self.channel).Subscribe(
            xmon_pb2.SubscribeRequest(protocol_version=1)
        )

    def ended(self) -> grpc.StatusCode | None:
        """The stream's status once the daemon ended it, else None."""
        return self.call.code() if self.call.done() else None  # type: ignore[no-any-return]

    def close(self) -> None:
        self.call.cancel()
        self.channel.close()


def idle_connections(socket_path: Path, count: int) -> list[socket.socket]:
    """``count`` raw unix connections that never send an HTTP/2 preface."""
    connections = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(socket_path))
        connections.append(sock)
    return connections


def slow_metrics_clients(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` HTTP clients that send half a request to /metrics and then nothing."""
    clients = []
    for _ in range(count):
        sock = socket.create_connection((host, port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        clients.append(sock)
    return clients


def close_all(things: list[socket.socket] | list[RawStream] | list[StalledView]) -> None:
    for thing in things:
        thing.close()


# A gRPC client can only send whole messages, so the streams that stop one byte short of the
# end of a message speak HTTP/2 themselves: frames per RFC 9113, headers as HPACK literals.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY, _WINDOW = 0, 1, 3, 4, 6, 7, 8
_FRAME_BYTES = 16384  # SETTINGS_MAX_FRAME_SIZE's initial value


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _literal(name: str, value: str) -> bytes:
    """One header as an HPACK literal without indexing (names and values under 127 bytes)."""
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


_CONNECT_HEADERS = b"".join(
    _literal(name, value)
    for name, value in (
        (":method", "POST"), (":scheme", "http"), (":path", "/xmon.v1.Ingest/Connect"),
        (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers"),
    )
)  # fmt: skip


def grpc_frame(message: bytes) -> bytes:
    """``message`` as gRPC puts it on a stream: uncompressed flag, 4-byte length, bytes."""
    return b"\0" + len(message).to_bytes(4, "big") + message


class UnfinishedMessages:
    """``streams`` Connect streams over ``connections`` raw HTTP/2 connections, each sending
    ``first(i)`` (whole messages, e.g. the hello of stream ``i``) and then all but the last
    byte of a message of ``size`` bytes, as fast as the daemon's flow-control windows allow;
    then they wait.

    ``sent`` counts the bytes of unfinished messages the daemon let in; ``reset`` the streams it
    ended. One thread per connection keeps reading the daemon's frames (window updates)."""

    def __init__(
        self,
        socket_path: Path,
        streams: int,
        size: int,
        first: Callable[[int], bytes] | None = None,
        connections: int = 20,
    ) -> None:
        self.sent = 0
        self.reset = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        unfinished = grpc_frame(b"\0" * size)[:-1]
        payloads = [(grpc_frame(first(i)) if first else b"") + unfinished for i in range(streams)]
        per = -(-streams // connections)
        self._threads = [
            threading.Thread(
                target=self._connection, args=(socket_path, payloads[i : i + per]), daemon=True
            )
            for i in range(0, streams, per)
        ]
        for thread in self._threads:
            thread.start()

    def _connection(self, socket_path: Path, payloads: list[bytes]) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(socket_path))
            _H2Sender(sock, payloads, self).run(self._stop)
        except OSError:
            pass  # the daemon closed the connection: counted as reset by the sender
        finally:
            sock.close()

    def note(self, sent: int = 0, reset: int = 0) -> None:
        with self._lock:
            self.sent += sent
            self.reset += reset

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


class _H2Sender:
    """One connection's streams: headers, then data within the peer's windows."""

    def __init__(
        self, sock: socket.socket, payloads: list[bytes], owner: UnfinishedMessages
    ) -> None:
        self.sock, self.owner = sock, owner
        self.ids = [1 + 2 * i for i in range(len(payloads))]
        self.payload = dict(zip(self.ids, payloads, strict=True))
        self.offset = dict.fromkeys(self.ids, 0)
        self.initial = 65535  # SETTINGS_INITIAL_WINDOW_SIZE until the daemon says otherwise
        self.window = dict.fromkeys(self.ids, 0)  # credit beyond the initial window
        self.connection = 65535
        self.buffer = b""

    def run(self, stop: threading.Event) -> None:
        self.sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0))
        self.sock.sendall(b"".join(_frame(_HEADERS, 0x4, i, _CONNECT_HEADERS) for i in self.ids))
        self.sock.settimeout(0.05)
        while not stop.is_set():
            self._send()
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                self.owner.note(reset=len(self.offset))
                return
            self._read(data)

    def _send(self) -> None:
        out = []
        for stream, offset in list(self.offset.items()):
            payload = self.payload[stream]
            room = min(self.initial + self.window[stream] - offset, self.connection,
                       len(payload) - offset)  # fmt: skip
            while room > 0:
                chunk = payload[offset : offset + min(room, _FRAME_BYTES)]
                out.append(_frame(_DATA, 0, stream, chunk))
                offset += len(chunk)
                room -= len(chunk)
                self.connection -= len(chunk)
                self.owner.note(sent=len(chunk))
            self.offset[stream] = offset
        if out:  # within the daemon's windows: it reads these, so a blocking send ends
            self.sock.settimeout(30)
            self.sock.sendall(b"".join(out))
            self.sock.settimeout(0.05)

    def _read(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                return
            kind, flags = self.buffer[3], self.buffer[4]
            stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload, self.buffer = self.buffer[9 : 9 + length], self.buffer[9 + length :]
            self._on_frame(kind, flags, stream, payload)

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == _SETTINGS and not flags & 0x1:
            for i in range(0, len(payload), 6):
                if int.from_bytes(payload[i : i + 2], "big") == 0x4:  # INITIAL_WINDOW_SIZE
                    self.initial = int.from_bytes(payload[i + 2 : i + 6], "big")
            self.sock.sendall(_frame(_SETTINGS, 0x1, 0))
        elif kind == _PING and not flags & 0x1:
            self.sock.sendall(_frame(_PING, 0x1, 0, payload))
        elif kind == _WINDOW:
            credit = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if stream == 0:
                self.connection += credit
            elif stream in self.window:
                self.window[stream] += credit
        elif stream in self.offset and (kind == _RST or (kind == _HEADERS and flags & 0x1)):
            del self.offset[stream]  # ended by the daemon (trailers or a reset)
            self.owner.note(reset=1)


class MemoryCap:
    """A memory cgroup holding one process, as the unit's ``MemoryMax=``: the kernel OOM-kills
    the process past ``limit`` bytes, counting what it holds in the kernel for it too (socket
    buffers). cgroup v2 (``memory.max``) where it is mounted, else v1 (``limit_in_bytes``);
    ``None`` from ``create`` where neither can be made (not root, no memory controller)."""

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @classmethod
    def create(cls, pid: int, limit: int, name: str = "xmon-test") -> MemoryCap | None:
        v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")
        for root, version, knob in ((v2, 2, "memory.max"), (v1, 1, "memory.limit_in_bytes")):
            if version == 2 and not (root / "cgroup.controllers").is_file():
                continue
            path = root / f"{name}-{pid}"
            try:
                path.mkdir()
                (path / knob).write_text(str(limit))
                if version == 1:  # no swap to spill into: the limit is the process's memory
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
                (path / "cgroup.procs").write_text(str(pid))
            except OSError:
                if path.is_dir():
                    path.rmdir()
                continue
            return cls(path, version)
        return None

    def peak(self) -> int:
        """The most bytes the cgroup held (v2 kernels before 5.19 have no memory.peak)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text())
        except OSError:
            return 0

    def ooms(self) -> int:
        """Processes the kernel killed for the limit (v2: ``oom_kill`` in memory.events)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Remove the cgroup once its process has ended (or moved out)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)
