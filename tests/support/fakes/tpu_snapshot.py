"""Hand-built TPU parts of a Snapshot, for exporter and view tests that need no server."""

from __future__ import annotations

from xmon.model import Device, Distribution, HardwareCounters, RuntimeMetric, RuntimeService

GIB = 1024**3
ADDRESS = "localhost:8431"
DCN = "megascale.dcn_transfer_latencies.microsecond.cumulative.distribution"

TPU_DEVICE = Device(
    index=2, platform="tpu", device_kind="TPU v6 lite", source="tpu",
    hardware=HardwareCounters(
        memory_used_bytes=20 * GIB, memory_total_bytes=33_550_229_504, duty_cycle_ratio=0.925,
        memory_bandwidth_utilization_ratio=0.415, idle_seconds=0.0,
    ),
    pci_bus_id="0000:00:04.0", pids=(1000,), device_path="/dev/vfio/0", numa_node=0,
    chip_index=0, runtime_address=ADDRESS,
)  # fmt: skip

LATENCY = Distribution(
    count=10, sum=0.0045, min=0.0002, max=0.0011,
    buckets=((0.000256, 2), (0.000512, 7), (0.001024, 9)),
    quantiles=((0.5, 0.0004), (0.9, 0.001)),
)  # fmt: skip

RUNTIME_SERVICES = (
    RuntimeService(
        source="tpu", address=ADDRESS, up=True,
        supported=("tpu.runtime.hbm.memory.usage.bytes", "tpu.runtime.uptime.seconds.gauge",
                   DCN, "megascale.dcn_transfer_size.bytes.cumulative.distribution",
                   "megascale.grpc_tcp_packets_sent.cumulative.count", "fake.summary"),
        metrics=(
            RuntimeMetric("tpu.runtime.uptime.seconds.gauge", "gauge",
                          attributes=(("ml_framework_name", "jax"),), value=5400.0),
            RuntimeMetric("megascale.grpc_tcp_packets_sent.cumulative.count", "counter",
                          device=2, value=120_000.0),
            RuntimeMetric(DCN, "distribution", "seconds",
                          attributes=(("buffer_size", "8MB+"), ("type", "grpc")),
                          distribution=LATENCY),
            RuntimeMetric("megascale.dcn_transfer_size.bytes.cumulative.distribution",
                          "distribution",
                          distribution=Distribution(3, 3072.0, buckets=((1024.0, 3),))),
            RuntimeMetric("fake.summary", "summary",
                          distribution=Distribution(4, 2.0, quantiles=((0.5, 0.4), (0.99, 0.9)))),
        ),
    ),
    RuntimeService(source="tpu", address="localhost:8432", up=False,
                   error="unavailable: failed to connect to all addresses"),
)  # fmt: skip
