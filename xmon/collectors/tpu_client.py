"""Client of libtpu's runtime metrics service (``tpu.monitoring.runtime.RuntimeMetricService``).

The same service and proto tpu-info reads; the stubs are tpu-info's own (``tpu_info.proto``,
generated from libtpu's .proto files), so there is one definition of the wire format. libtpu
serves it with gRPC *local* credentials, so the channel uses them too (TCP on loopback, or a
unix socket). Every metric the service lists is fetched concurrently each poll, all under one
deadline. Each unary RPC costs the daemon a quarter to a whole millisecond of CPU, so the
collector decides how often to list and which metrics to fetch (see ``TpuCollector``). One
channel per address lives as long as the collector: closing it between polls saves nothing in
a process that also serves gRPC (gRPC's threads keep their pace once a client was used), and
reconnecting costs ~1.4 ms of CPU.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from tpu_info.proto import tpu_metric_service_pb2 as pb
from tpu_info.proto import tpu_metric_service_pb2_grpc as pb_grpc

# Reconnect quickly once a job starts serving (gRPC's default backoff grows to two minutes).
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # Small answers on a local connection: bandwidth-delay probing (a ping after each burst of
    # data) only keeps gRPC's threads waking between polls.
    ("grpc.http2.bdp_probe", 0),
)


_SEQUENTIAL_UP_TO = 6  # metrics fetched one by one; more are fetched concurrently


class ServiceUnavailable(Exception):
    """The service did not list its metrics; the message says why, in one line."""


@dataclass(frozen=True)
class Poll:
    """One poll of one service: what it lists and what it answered."""

    supported: tuple[str, ...]
    metrics: dict[str, Any] = field(default_factory=dict)  # name -> pb.TPUMetric
    errors: dict[str, str] = field(default_factory=dict)  # name -> "not_found: ..."
    missing: set[str] = field(default_factory=set)  # listed, yet answered NOT_FOUND


def credentials_for(address: str) -> grpc.ChannelCredentials:
    """Local credentials, as libtpu's server requires: UDS for unix: targets, else TCP."""
    local = grpc.LocalConnectionType
    kind = local.UDS if address.startswith("unix:") else local.LOCAL_TCP
    return grpc.local_channel_credentials(kind)


def describe(error: grpc.RpcError) -> str:
    """One line: the status code and the first line of the details."""
    code = error.code() if isinstance(error, grpc.Call) else None
    details = (error.details() or "").splitlines() if isinstance(error, grpc.Call) else []
    name = code.name.lower() if code is not None else "error"
    return f"{name}: {details[0]}" if details else name


class RuntimeMetricsClient:
    """Polls one address. Not thread-safe; the collector calls it from one thread."""

    def __init__(self, address: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.address = address
        self._clock = clock
        self._channel = grpc.secure_channel(
            address, credentials_for(address), options=_CHANNEL_OPTIONS
        )
        self._stub = pb_grpc.RuntimeMetricServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def _left(self, deadline: float) -> float:
        return max(0.01, deadline - self._clock())

    def list_supported(self, deadline: float) -> tuple[str, ...]:
        try:
            answer = self._stub.ListSupportedMetrics(
                pb.ListSupportedMetricsRequest(), timeout=self._left(deadline)
            )
        except grpc.RpcError as exc:
            raise ServiceUnavailable(describe(exc)) from None
        names = (m.metric_name for m in answer.supported_metric if m.metric_name)
        return tuple(dict.fromkeys(names))

    def poll(
        self,
        deadline: float,
        only: frozenset[str] | None = None,
        supported: tuple[str, ...] | None = None,
    ) -> Poll:
        """Fetch each listed metric (or those in ``only``) concurrently.

        Lists the metrics first unless ``supported`` (a listing kept from an earlier poll) is
        given. Raises :class:`ServiceUnavailable` when the listing fails, or when nothing was
        fetched and the service did not answer at all; a metric that fails on its own
        (NOT_FOUND for megascale metrics of a single-slice job) lands in ``errors``.
        """
        if supported is None:
            supported = self.list_supported(deadline)
        wanted = [n for n in supported if only is None or n in only]
        result = Poll(supported)
        unreachable: str | None = None
        for name, answer in self._fetch(wanted, deadline):
            try:
                result.metrics[name] = answer().metric
            except grpc.RpcError as exc:
                result.errors[name] = describe(exc)
                if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.NOT_FOUND:
                    result.missing.add(name)
                else:
                    unreachable = unreachable or result.errors[name]
        if unreachable is not None and not result.metrics:
            raise ServiceUnavailable(unreachable)
        return result

    def _fetch_one(self, fetch: Callable[..., Any], request: Any, deadline: float) -> Any:
        return fetch(request, timeout=self._left(deadline))

    def _fetch(self, names: list[str], deadline: float) -> Iterator[tuple[str, Callable[[], Any]]]:
        """(name, a call that returns the answer or raises) per metric, all by ``deadline``.

        gRPC's sync API starts a thread for every batch of futures, which costs more than the
        calls themselves for a handful of metrics: those go one after another instead.
        """
        fetch = self._stub.GetRuntimeMetric
        if len(names) <= _SEQUENTIAL_UP_TO:
            for name in names:
                request = pb.MetricRequest(metric_name=name)
                yield name, functools.partial(self._fetch_one, fetch, request, deadline)
            return
        timeout = self._left(deadline)
        futures = [
            (n, fetch.future(pb.MetricRequest(metric_name=n), timeout=timeout)) for n in names
        ]
        for name, future in futures:
            yield name, future.result
