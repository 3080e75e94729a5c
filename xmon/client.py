"""Client side of the daemon's control API, for every view (top, monitor, ls, capture).

Snapshots arrive as JSON of the one data model and are decoded back into ``xmon.model``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc

from xmon import paths
from xmon.model import Snapshot, snapshot_from_dict
from xmon.proto import xmon_pb2, xmon_pb2_grpc

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class DaemonUnavailable(RuntimeError):
    """No daemon answers on the socket; the message says what to do about it."""


class DaemonClient:
    def __init__(self, socket_path: Path | None = None, connect_timeout: float = 2.0) -> None:
        self.socket_path = socket_path or paths.default_socket_path()
        self._timeout = connect_timeout
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
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self._timeout)
        except grpc.FutureTimeoutError:
            raise self._unavailable() from None

    def get_snapshot(self) -> Snapshot:
        self.wait_ready()
        try:
            message = self._stub.GetSnapshot(
                xmon_pb2.GetSnapshotRequest(protocol_version=xmon_pb2.PROTOCOL_VERSION),
                timeout=max(self._timeout, 5.0),
            )
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
        request = xmon_pb2.SubscribeRequest(protocol_version=xmon_pb2.PROTOCOL_VERSION)
        stream = self._stub.Subscribe(request)
        try:
            for message in stream:
                yield decode(message)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._unavailable(exc) from exc
        finally:
            stream.cancel()


def decode(message: xmon_pb2.SnapshotMessage) -> Snapshot:
    return snapshot_from_dict(json.loads(message.json))
