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
from collections.abc import Iterable, Iterator
from pathlib import Path

import grpc

from xmon.proto import xmon_pb2, xmon_pb2_grpc
from xmon.proto import xplane_pb2 as xp
from xmon.wire import PART_BYTES, in_parts

from procs import Daemon, start_daemon

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
    the daemon takes in one message (xmon.wire.in_parts)."""
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


def report(programs: int = 0, padding: int = 0, memory_devices: int = 0, seq: int = 1) -> bytes:
    """An AgentMessage carrying a report that announces ``programs`` programs (and memory
    readings of ``memory_devices`` devices)."""
    message = xmon_pb2.AgentReport(
        seq=seq,
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
