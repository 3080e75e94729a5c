"""Client side of the daemon's control API, for every view (top, monitor, ls, capture).

Snapshots arrive as JSON of the one data model and are decoded back into ``xmon.model``.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from xmon.model import Snapshot, snapshot_from_dict
from xmon.wire import paths
from xmon.wire.proto import xmon_pb2, xmon_pb2_grpc

Reply = TypeVar("Reply")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_HLO_TEXT_BYTES = 256 * 1024 * 1024  # unpacked; the largest modules' text is tens of MiB
# Unpacked snapshot JSON: a 16 MiB message of 8 jobs x 4,096 programs unpacks to ~150 MiB.
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"
UINT32_MAX = 2**32 - 1  # duration_ms is a uint32 on the wire


class DaemonUnavailable(RuntimeError):
    """No daemon answers on the socket; the message says what to do about it."""


class RequestFailed(RuntimeError):
    """The daemon refused or could not do a capture or HLO request; ``code`` is the gRPC
    status name (NOT_FOUND, ABORTED for busy, RESOURCE_EXHAUSTED for disk full, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class CaptureResult:
    """A finished capture (``Control.Capture``)."""

    job_name: str
    pid: int
    kind: str  # "trace" | "memory"
    log_dir: str  # give this to tensorboard / xprof as --logdir
    run_dir: str  # the job's run: <log_dir>/<job>-<pid>
    paths: tuple[str, ...]  # .xplane.pb files, or the memory profile (.prof)
    message: str
    seconds: float


@dataclass(frozen=True)
class HloText:
    job_name: str
    pid: int
    fingerprint: str
    program_name: str
    text: str  # optimized HLO


class DaemonClient:
    def __init__(self, socket_path: Path | None = None, connect_timeout: float = 2.0) -> None:
        self.socket_path = socket_path or paths.default_socket_path()
        self._timeout = connect_timeout
        self._ready = False
        self._channel = grpc.insecure_channel(
            paths.grpc_target(self.socket_path),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        self._stub = xmon_pb2_grpc.ControlStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unavailable(self, error: grpc.RpcError | None = None) -> DaemonUnavailable:
        detail = f" ({error.details()})" if error is not None and error.details() else ""
        return DaemonUnavailable(
            f"no xmon daemon is answering on {self.socket_path}{detail}. Start one with "
            "`xmon daemon` (or `systemctl start xmon`), or point XMON_SOCKET / --socket at it."
        )

    def wait_ready(self) -> None:
        # Once per client: each ready-future leaves a connectivity-polling thread behind that
        # complains ("Channel closed!") if the channel is closed while it still polls.
        if self._ready:
            return
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self._timeout)
        except grpc.FutureTimeoutError:
            raise self._unavailable() from None
        self._ready = True

    def get_snapshot(self, fresh: bool = False) -> Snapshot:
        """The daemon's latest snapshot, or with ``fresh`` the next one it collects (at most a
        period away), whose hardware numbers were read for this request."""
        self.wait_ready()
        request = xmon_pb2.GetSnapshotRequest(
            protocol_version=xmon_pb2.PROTOCOL_VERSION, fresh=fresh
        )
        try:
            message = self._stub.GetSnapshot(request, timeout=max(self._timeout, 5.0, 15.0 * fresh))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE and "no snapshot yet" in (
                exc.details() or ""
            ):
                return self._first_from_stream()
            raise self._unavailable(exc) from exc
        return decode(message)

    def _first_from_stream(self) -> Snapshot:
        for snapshot in self.subscribe():
            return snapshot
        raise self._unavailable()

    def subscribe(self) -> Iterator[Snapshot]:
        """Snapshots as the daemon makes them, until the daemon goes away (raises)."""
        self.wait_ready()
        request = xmon_pb2.SubscribeRequest(
            protocol_version=xmon_pb2.PROTOCOL_VERSION, changes_only=True
        )
        stream = self._stub.Subscribe(request)
        reader = SnapshotReader()
        try:
            for message in stream:
                yield reader.read(message)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._unavailable(exc) from exc
        finally:
            stream.cancel()

    def capture(
        self,
        job_name: str | None = None,
        job_pid: int | None = None,
        duration_s: float = 3.0,
        log_dir: str | Path | None = None,
        memory: bool = False,
    ) -> CaptureResult:
        """Ask the daemon to trace a job for ``duration_s`` (or save its device memory profile
        with ``memory=True``); blocks until the files are written. The job is ``job_pid``, else
        the job named ``job_name``, else the only attached one. Raises :class:`RequestFailed`
        (busy, unknown job, disk full, ...) or :class:`DaemonUnavailable`."""
        self.wait_ready()
        request = xmon_pb2.CaptureRequest(
            protocol_version=xmon_pb2.PROTOCOL_VERSION,
            job_name=job_name or "",
            pid=job_pid or 0,
            duration_ms=min(max(0, round(duration_s * 1000)), UINT32_MAX),  # daemon refuses
            log_dir=str(Path(log_dir).expanduser().absolute()) if log_dir else "",
            memory_profile=memory,
        )
        capture: Callable[..., xmon_pb2.CaptureReply] = self._stub.Capture
        reply = self._call(capture, request, (0 if memory else duration_s) + 90.0)
        return CaptureResult(
            job_name=reply.job_name, pid=reply.pid, kind=reply.kind, log_dir=reply.log_dir,
            run_dir=reply.run_dir, paths=tuple(reply.paths), message=reply.message,
            seconds=reply.seconds,
        )  # fmt: skip

    def get_hlo(
        self, fingerprint: str, job_name: str | None = None, job_pid: int | None = None
    ) -> HloText:
        """The optimized HLO text of a program, by fingerprint or a unique prefix of it."""
        self.wait_ready()
        request = xmon_pb2.GetHloRequest(
            protocol_version=xmon_pb2.PROTOCOL_VERSION,
            job_name=job_name or "",
            pid=job_pid or 0,
            fingerprint=fingerprint,
        )
        get_hlo: Callable[..., xmon_pb2.GetHloReply] = self._stub.GetHlo
        reply = self._call(get_hlo, request, 60.0)
        try:
            text = gunzip(reply.hlo_gzip, MAX_HLO_TEXT_BYTES).decode(errors="replace")
        except ValueError as exc:
            why = f"the daemon's HLO text for {fingerprint}: {exc}"
            raise RequestFailed("DATA_LOSS", why) from None
        return HloText(reply.job_name, reply.pid, reply.fingerprint, reply.program_name, text)

    def _call(self, method: Callable[..., Reply], request: object, timeout: float) -> Reply:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code()
            # The daemon's own UNAVAILABLE answers name the job; any other is the channel's.
            if code == grpc.StatusCode.UNAVAILABLE and not (exc.details() or "").startswith("job "):
                raise self._unavailable(exc) from exc
            raise RequestFailed(code.name, exc.details() or code.name) from None


def gunzip(data: bytes, limit: int) -> bytes:
    """``data`` (gzip, one member or several) unpacked, at most ``limit`` bytes of it: a few
    MiB of gzip may unpack to gigabytes (3.5 GB ended a client with MemoryError). ValueError
    past the limit or on data that is not gzip."""
    out: list[bytes] = []
    size = 0
    while data:
        unpacker = zlib.decompressobj(wbits=31)  # one gzip member
        try:
            chunk = unpacker.decompress(data, limit - size + 1)
        except zlib.error as exc:
            raise ValueError(f"not gzip ({exc})") from None
        size += len(chunk)
        if size > limit:
            raise ValueError(f"unpacks to over {limit >> 20} MiB")
        if not unpacker.eof:
            raise ValueError("cut off")
        out.append(chunk)
        data = unpacker.unused_data
    return b"".join(out)


def decode(message: xmon_pb2.SnapshotMessage) -> Snapshot:
    """A snapshot from the daemon: JSON, gzip-compressed when large (the daemon compresses
    snapshots of a quarter MiB and more, so that thousands of programs still fit a message)."""
    return SnapshotReader().read(message)


class SnapshotReader:
    """Reads one stream's snapshots, whole or as changes from the one before it: a job whose
    programs are those of the previous snapshot's job ``i`` comes as ``{"same_as_job": i}``
    (``SubscribeRequest.changes_only``), and takes that job's programs, already decoded."""

    def __init__(self) -> None:
        self._previous: Snapshot | None = None

    def read(self, message: xmon_pb2.SnapshotMessage) -> Snapshot:
        payload = message.json
        try:
            if payload[:2] == GZIP_MAGIC:  # JSON never starts with this byte
                payload = gunzip(payload, MAX_SNAPSHOT_BYTES)
            data = json.loads(payload)
            same = _programs_as_before(data)
            snapshot = self._filled(snapshot_from_dict(data), same)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a bomb, not JSON, ...
            # not a snapshot: one line for the view, never a traceback
            raise RequestFailed("DATA_LOSS", f"the daemon's snapshot is unusable: {exc}") from None
        self._previous = snapshot
        return snapshot

    def _filled(self, snapshot: Snapshot, same: dict[int, int]) -> Snapshot:
        if not same:
            return snapshot
        before = self._previous.jobs if self._previous is not None else ()
        jobs = list(snapshot.jobs)
        for index, previous in same.items():
            if not 0 <= previous < len(before):
                raise ValueError(f"job {index}'s programs are those of a snapshot not read")
            jobs[index] = dataclasses.replace(jobs[index], programs=before[previous].programs)
        return dataclasses.replace(snapshot, jobs=tuple(jobs))


def _programs_as_before(data: Any) -> dict[int, int]:
    """The jobs of a snapshot's JSON whose programs are named, not sent: {index: index in the
    snapshot before}. Their ``programs`` become empty, to be filled once decoded."""
    same: dict[int, int] = {}
    jobs = data.get("jobs") if isinstance(data, dict) else None
    for index, job in enumerate(jobs if isinstance(jobs, list) else ()):
        programs = job.get("programs") if isinstance(job, dict) else None
        if isinstance(programs, dict):
            previous = programs.get("same_as_job")
            if type(previous) is not int:
                raise ValueError(f"job {index}'s programs are neither a list nor named")
            same[index] = previous
            job["programs"] = []
    return same
