"""A fake libtpu runtime metrics server: the real service and proto, made-up but plausible data.

It implements ``tpu.monitoring.runtime.RuntimeMetricService`` from tpu-info's generated stubs
(the proto libtpu serves) with gRPC *local* credentials, as libtpu does, so xmon's collector
and the real ``tpu-info`` CLI can both talk to it. Data shapes follow what tpu-info and Google's
TPU device plugin decode: per-device gauges keyed by an ``int_attr`` named "device-id", HLO
metrics keyed by a kvlist with ``device_ordinal`` (a string of digits), megascale
distributions keyed by kvlists such as ``buffer_size`` / ``type``, exponential buckets.

Run it by hand to point tools at it:
``python tests/support/fakes/libtpu_server.py --generation v6e --chips 8 --address localhost:8431``.
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, replace
from typing import Any

import grpc
from tpu_info.proto import tpu_metric_service_pb2 as pb
from tpu_info.proto import tpu_metric_service_pb2_grpc as pb_grpc
from tpu_info.proto import tpu_telemetry_pb2 as telemetry

GIB = 1024**3
MIB = 1024**2
# Per-device HBM capacity as libtpu reports it. v6e's is the value libtpu's own SDK
# documentation shows (31.24 GiB); the others are the spec capacities (per TensorCore on
# v2/v3/7x, where each core is its own device).
HBM_TOTAL = {"v2": 8 * GIB, "v3": 16 * GIB, "v4": 32 * GIB, "v5e": 16 * GIB, "v5p": 95 * GIB,
             "v6e": 33_550_229_504, "7x": 96 * GIB}  # fmt: skip
DEVICES_PER_CHIP = {"v2": 2, "v3": 2, "7x": 2}

HBM_USED = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL_NAME = "tpu.runtime.hbm.memory.total.bytes"
DUTY = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_UTIL = "tpu.runtime.hbm.utilization.percent"
IDLE = "tpu.runtime.tensorcore.idle_duration.seconds"
UPTIME = "tpu.runtime.uptime.seconds.gauge"
QUEUE = "hlo.queue.size.gauge"
HLO_TIMING = "hlo.execution.timing.distribution.microseconds"
DCN_LATENCY = "megascale.dcn_transfer_latencies.microsecond.cumulative.distribution"
COLLECTIVE_LATENCY = "megascale.collective_end_to_end_latencies.microsecond.cumulative.distribution"
DELIVERY_RATE = "megascale.grpc_tcp_delivery_rate.Mbps.cumulative.distribution"
DCN_SIZE = "megascale.dcn_transfer_size.bytes.cumulative.distribution"
PACKETS_SENT = "megascale.grpc_tcp_packets_sent.cumulative.count"
MEGASCALE = (DCN_LATENCY, COLLECTIVE_LATENCY, DELIVERY_RATE, DCN_SIZE, PACKETS_SENT)


@dataclass(frozen=True)
class DeviceLoad:
    hbm_used: int
    hbm_total: int
    duty_pct: float
    hbm_util_pct: float
    idle_seconds: float
    queue: int
    step_us: float  # typical HLO execution time


@dataclass(frozen=True)
class Scenario:
    generation: str
    devices: tuple[DeviceLoad, ...]
    multislice: bool = False  # megascale metrics answer; else NOT_FOUND (single slice)
    uptime_seconds: int = 5400
    framework: tuple[str, str] = ("jax", "0.7.2")
    unavailable: frozenset[str] = frozenset()  # these metrics answer UNAVAILABLE
    unlisted: frozenset[str] = frozenset()  # left out of ListSupportedMetrics
    down: bool = False  # every RPC answers UNAVAILABLE (the job is starting)
    delay_seconds: float = 0.0  # before every answer (a slow or hung runtime)
    ordinal_as_int: bool = False  # older libtpu: device_ordinal as an int_attr

    @property
    def chips(self) -> int:
        return len(self.devices) // DEVICES_PER_CHIP.get(self.generation, 1)


def scenario(generation: str = "v5e", chips: int = 4, **changes: Any) -> Scenario:
    """A job training on every chip: 60-76 % of HBM live, ~90 % duty cycle."""
    total = HBM_TOTAL[generation]
    n = chips * DEVICES_PER_CHIP.get(generation, 1)
    devices = tuple(
        DeviceLoad(
            hbm_used=int(total * (0.6 + 0.04 * (i % 5))) // MIB * MIB,
            hbm_total=total,
            duty_pct=(92.5, 88.0, 95.25, 90.75)[i % 4],
            hbm_util_pct=(41.5, 38.25, 44.0, 39.75)[i % 4],
            idle_seconds=0.0,
            queue=(2, 1, 3, 2)[i % 4],
            step_us=2400.0 + 150.0 * (i % 3),
        )
        for i in range(n)
    )
    return replace(Scenario(generation, devices), **changes)


# --- data points -------------------------------------------------------------------------------


def _device_id(i: int) -> pb.Attribute:
    return pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=i))


def _kvlist(key: str, pairs: dict[str, str | int]) -> pb.Attribute:
    items = [
        pb.Attribute(key=k, value=pb.AttrValue(int_attr=v) if isinstance(v, int)
                     else pb.AttrValue(string_attr=v))
        for k, v in pairs.items()
    ]  # fmt: skip
    return pb.Attribute(key=key, value=pb.AttrValue(kvlist_attr=pb.KeyValueList(attributes=items)))


def _ordinal(s: Scenario, i: int, **more: str) -> pb.Attribute:
    ordinal: str | int = i if s.ordinal_as_int else str(i)
    return _kvlist("hlo", {"device_ordinal": ordinal, **more})


def distribution(samples: Sequence[float], scale: float = 1.0, growth: float = 2.0,
                 finite: int = 24) -> pb.Distribution:  # fmt: skip
    """An exponential-bucket Distribution of ``samples`` (trailing empty buckets dropped)."""
    counts = [0] * (finite + 2)
    for v in samples:
        i = 0 if v < scale else min(finite + 1, int(math.log(v / scale, growth)) + 1)
        counts[i] += 1
    while counts and counts[-1] == 0:
        counts.pop()
    n = len(samples)
    # math.fsum: Python 3.12 made sum() of floats compensated, so sum() would give the golden
    # files another last digit on each side of 3.12; fsum is correctly rounded on all of them
    mean = math.fsum(samples) / n if n else 0.0
    options = pb.Distribution.BucketOptions(
        exponential_buckets=pb.Distribution.BucketOptions.Exponential(
            num_finite_buckets=finite, growth_factor=growth, scale=scale
        )
    )
    return pb.Distribution(
        count=n, mean=mean, min=min(samples, default=0.0), max=max(samples, default=0.0),
        sum_of_squared_deviation=math.fsum((v - mean) ** 2 for v in samples),
        bucket_options=options, bucket_counts=counts,
    )  # fmt: skip


def spread(center: float, n: int = 40) -> list[float]:
    """Deterministic samples around ``center``: most within +-40 %, a slow tail of three."""
    return [center * (0.6 + 0.8 * k / (n - 1)) for k in range(n)] + [center * 3] * 3


def _gauges(s: Scenario, get: Callable[[DeviceLoad], float], as_int: bool) -> list[pb.Metric]:
    def gauge(v: float) -> pb.Gauge:
        return pb.Gauge(as_int=int(v)) if as_int else pb.Gauge(as_double=float(v))

    return [
        pb.Metric(attribute=_device_id(i), gauge=gauge(get(d))) for i, d in enumerate(s.devices)
    ]


def _per_chip(s: Scenario, get: Callable[[DeviceLoad], float]) -> list[pb.Metric]:
    """Duty cycle is per chip (tpu-info repeats it for each core on v2/v3)."""
    per = DEVICES_PER_CHIP.get(s.generation, 1) if s.generation in ("v2", "v3") else 1
    chips = s.devices[::per]
    return [pb.Metric(attribute=_device_id(i), gauge=pb.Gauge(as_double=get(d)))
            for i, d in enumerate(chips)]  # fmt: skip


def _megascale(name: str, s: Scenario) -> list[pb.Metric]:
    if name == DCN_LATENCY:
        return [pb.Metric(attribute=_kvlist("megascale", {"buffer_size": size, "type": "grpc"}),
                          distribution=distribution(spread(us)))
                for size, us in (("1MB+", 180.0), ("8MB+", 950.0))]  # fmt: skip
    if name == COLLECTIVE_LATENCY:
        attr = _kvlist("megascale", {"input_size": "8MB+", "collective_type": "ALL_REDUCE"})
        return [pb.Metric(attribute=attr, distribution=distribution(spread(4200.0)))]
    if name == DELIVERY_RATE:
        return [
            pb.Metric(attribute=_kvlist("megascale", {}), distribution=distribution(spread(9000.0)))
        ]
    if name == DCN_SIZE:
        attr = _kvlist("megascale", {"type": "grpc"})
        return [pb.Metric(attribute=attr, distribution=distribution(spread(4 * MIB), 1024.0))]
    return [pb.Metric(attribute=_device_id(i), counter=pb.Counter(as_int=120_000 + 1000 * i))
            for i in range(len(s.devices))]  # fmt: skip


def points(name: str, s: Scenario) -> list[pb.Metric] | None:
    """The data points of one metric, or None when this scenario does not serve it."""
    if name in MEGASCALE:
        return _megascale(name, s) if s.multislice else None
    simple: dict[str, Callable[[], list[pb.Metric]]] = {
        HBM_USED: lambda: _gauges(s, lambda d: d.hbm_used, True),
        HBM_TOTAL_NAME: lambda: _gauges(s, lambda d: d.hbm_total, True),
        DUTY: lambda: _per_chip(s, lambda d: d.duty_pct),
        HBM_UTIL: lambda: _gauges(s, lambda d: d.hbm_util_pct, False),
        IDLE: lambda: _gauges(s, lambda d: d.idle_seconds, False),
        UPTIME: lambda: [pb.Metric(
            attribute=_kvlist("uptime_attributes", {"ml_framework_name": s.framework[0],
                                                    "ml_framework_version": s.framework[1]}),
            gauge=pb.Gauge(as_int=s.uptime_seconds))],
        QUEUE: lambda: [pb.Metric(attribute=_ordinal(s, i, core_type="tensorcore"),
                                  gauge=pb.Gauge(as_int=d.queue)) for i, d in enumerate(s.devices)],
        HLO_TIMING: lambda: [pb.Metric(attribute=_ordinal(s, i),
                                       distribution=distribution(spread(d.step_us)))
                             for i, d in enumerate(s.devices)],
    }  # fmt: skip
    return simple[name]() if name in simple else None


SERVED = (HBM_USED, HBM_TOTAL_NAME, DUTY, HBM_UTIL, IDLE, UPTIME, QUEUE, HLO_TIMING, *MEGASCALE)


# --- the service -------------------------------------------------------------------------------


class _Service(pb_grpc.RuntimeMetricServiceServicer):
    def __init__(self, owner: FakeLibtpu) -> None:
        self.owner = owner

    def _enter(self, rpc: str, context: grpc.ServicerContext) -> Scenario:
        s = self.owner.scenario
        self.owner.count(rpc)
        if s.delay_seconds:
            time.sleep(s.delay_seconds)
        if s.down:
            context.abort(grpc.StatusCode.UNAVAILABLE, "TPU runtime is starting")
        return s

    def ListSupportedMetrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        s = self._enter("ListSupportedMetrics", context)
        names = [n for n in SERVED if n not in s.unlisted]
        return pb.ListSupportedMetricsResponse(
            supported_metric=[pb.SupportedMetric(metric_name=n) for n in names]
        )

    def GetRuntimeMetric(self, request: Any, context: grpc.ServicerContext) -> Any:
        s = self._enter("GetRuntimeMetric", context)
        name = request.metric_name
        self.owner.count_metric(name)
        if name in s.unavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{name} is not available now")
        data = points(name, s) if name not in s.unlisted else None
        if data is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
        metric = pb.TPUMetric(name=name, description=f"fake {name}", metrics=data)
        return pb.MetricResponse(metric=metric)

    def GetTpuRuntimeStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        s = self._enter("GetTpuRuntimeStatus", context)
        per = DEVICES_PER_CHIP.get(s.generation, 1)
        answer = pb.GetTpuRuntimeStatusResponse(host_name="t1v-n-fake-w-0")
        for i in range(len(s.devices)):
            state = answer.core_states[i]
            state.core_id.CopyFrom(telemetry.TpuCoreIdentifier(
                global_core_id=i, chip_id=i // per,
                core_on_chip=telemetry.TpuCoreOnChipProto(
                    type=telemetry.TPU_CORE_TYPE_TENSOR_CORE, index=i % per)))  # fmt: skip
            state.xdb_server_running = False
        return answer


class FakeLibtpu:
    """The fake server. ``scenario`` may be swapped while it runs (a job starting, ending)."""

    def __init__(self, scenario: Scenario, address: str = "localhost:0") -> None:
        self.scenario = scenario
        self.calls: Counter[str] = Counter()
        self.metric_calls: Counter[str] = Counter()  # GetRuntimeMetric by metric name
        self._lock = threading.Lock()
        self._requested = address
        self._server: grpc.Server | None = None
        self.address = ""

    def count(self, rpc: str) -> None:
        with self._lock:
            self.calls[rpc] += 1

    def count_metric(self, name: str) -> None:
        with self._lock:
            self.metric_calls[name] += 1

    def start(self) -> FakeLibtpu:
        # No SO_REUSEPORT: a fixed port that is taken must fail, not be shared.
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)]
        )
        pb_grpc.add_RuntimeMetricServiceServicer_to_server(_Service(self), server)
        uds = self._requested.startswith("unix:")
        local = grpc.LocalConnectionType.UDS if uds else grpc.LocalConnectionType.LOCAL_TCP
        try:
            port = server.add_secure_port(self._requested, grpc.local_server_credentials(local))
        except RuntimeError as exc:  # grpcio raises instead of returning 0 on some versions
            raise OSError(f"cannot listen on {self._requested}: {exc}") from None
        if not uds and port == 0:
            raise OSError(f"cannot listen on {self._requested}")
        server.start()
        self._server = server
        host = self._requested.rsplit(":", 1)[0]
        self.address = self._requested if uds else f"{host}:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def __enter__(self) -> FakeLibtpu:
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Fakes:
    """Servers started for one test, all stopped at its end (see the tests' ``fakes`` fixture)."""

    def __init__(self) -> None:
        self.started: list[FakeLibtpu] = []

    def __call__(self, s: Scenario, address: str = "localhost:0") -> FakeLibtpu:
        server = FakeLibtpu(s, address).start()
        self.started.append(server)
        return server

    def stop(self) -> None:
        for server in self.started:
            server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generation", default="v5e", choices=sorted(HBM_TOTAL))
    parser.add_argument("--chips", type=int, default=4)
    parser.add_argument("--multislice", action="store_true")
    parser.add_argument("--address", default="localhost:8431")
    args = parser.parse_args(argv)
    s = scenario(args.generation, args.chips, multislice=args.multislice)
    server = FakeLibtpu(s, args.address).start()
    print(f"fake libtpu metrics ({args.chips} x {args.generation}) on {server.address}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
