"""Scrape latency of xmon's /metrics against series count, beside node_exporter in the same run.

Synthetic snapshots of ≈500, 2k and 10k series are published to a real MetricsEndpoint at a 1 s
period while a client scrapes like Prometheus (gzip, every 1 s and every 0.25 s), and
node_exporter (Debian's prometheus-node-exporter) is scraped the same way between them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import urllib.request

from xmon.exporters.prometheus import MetricsEndpoint
from xmon.model import (
    CompileStats,
    DaemonStats,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Program,
    Snapshot,
    StepStats,
)

from common import machine, summary, table, today, write_section
from support.procs import free_port, wait_for

SERIES_PER_DEVICE = 9  # memory series per job device
SERIES_PER_PROGRAM = 9


def synthetic_snapshot(target_series: int, seq: int) -> Snapshot:
    """Jobs of 8 devices and 50 programs each, enough of them to reach ~target_series."""
    devices = tuple(
        JobDevice(
            DeviceInfo(id=i, platform="tpu", device_kind="TPU v6 lite", coords=(i % 2, i // 2, 0)),
            DeviceMemory(
                bytes_in_use=seq * 1000 + i,
                peak_bytes_in_use=2**30,
                bytes_limit=2**35,
                bytes_reserved=0,
                largest_free_block_bytes=2**34,
                largest_alloc_size=2**20,
                num_allocs=100 + seq,
                pool_bytes=2**33,
                fragmentation_ratio=0.1,
            ),
        )
        for i in range(8)
    )
    programs = tuple(
        Program(
            fingerprint=f"{p:032x}",
            name=f"jit_fn_{p}",
            flops=1e9 * p,
            bytes_accessed=1e6,
            transcendentals=1e3,
            argument_bytes=1,
            output_bytes=2,
            temp_bytes=3,
            generated_code_bytes=4,
            peak_memory_bytes=5,
            compile_seconds=0.1,
        )
        for p in range(50)
    )
    per_job = len(devices) * (SERIES_PER_DEVICE + 1) + len(programs) * SERIES_PER_PROGRAM + 40
    jobs = tuple(
        Job(
            job_name=f"job{j}",
            pid=1000 + j,
            hostname="h",
            platform="tpu",
            jax_version="0.10.2",
            jaxlib_version="0.10.2",
            devices=devices,
            programs=programs,
            compile=CompileStats(compiles_total=seq),
            steps=StepStats(
                steps_total=seq, p50_step_seconds=0.1, p90_step_seconds=0.1, p99_step_seconds=0.2
            ),
        )
        for j in range(max(1, round(target_series / per_job)))
    )
    return Snapshot(
        seq=seq,
        wall_time=time.time(),
        monotonic=time.monotonic(),
        hostname="h",
        daemon=DaemonStats(version="bench", started_at=0.0),
        jobs=jobs,
    )


def scrape(url: str) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return time.perf_counter() - started, len(body)


def count_series(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def scrape_series(url: str, scrapes: int, interval: float) -> tuple[dict[str, float], int]:
    """Latency summary of ``scrapes`` scrapes ``interval`` apart, and the series count."""
    series = count_series(url)
    latencies = []
    for _ in range(scrapes):
        latencies.append(scrape(url)[0])
        time.sleep(interval)
    return summary(latencies), series


def measure_xmon(target: int, scrapes: int, interval: float) -> tuple[dict[str, float], int]:
    endpoint = MetricsEndpoint(program_limit=50)
    endpoint.start("127.0.0.1", 0)
    stop = threading.Event()
    snapshots = [synthetic_snapshot(target, seq) for seq in range(4)]

    def publish() -> None:
        seq = 0
        while not stop.is_set():
            endpoint.update(snapshots[seq % len(snapshots)])
            seq += 1
            stop.wait(1.0)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    url = f"http://127.0.0.1:{endpoint.port}/metrics"
    try:
        time.sleep(0.2)
        return scrape_series(url, scrapes, interval)
    finally:
        stop.set()
        endpoint.stop()


def measure_node_exporter(scrapes: int, interval: float) -> tuple[dict[str, float], int] | None:
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for(lambda: scrape(url), 10, "node_exporter")
        return scrape_series(url, scrapes, interval)
    finally:
        proc.terminate()
        proc.wait(5)


def main(quick: bool = False) -> str:
    scrapes = 10 if quick else 60
    rows = []
    for interval in (1.0, 0.25):
        node = measure_node_exporter(scrapes, interval)
        if node is not None:
            s, n = node
            rows.append(
                [
                    "node_exporter",
                    n,
                    f"{interval:g} s",
                    f"{s['median'] * 1e3:.1f}",
                    f"{s['p99'] * 1e3:.1f}",
                ]
            )
        for target in (500, 2000, 10000):
            s, n = measure_xmon(target, scrapes, interval)
            rows.append(
                ["xmon", n, f"{interval:g} s", f"{s['median'] * 1e3:.1f}", f"{s['p99'] * 1e3:.1f}"]
            )
    if shutil.which("prometheus-node-exporter") or shutil.which("node_exporter"):
        node_note = "node_exporter (Debian's prometheus-node-exporter) scraped in the same run."
    else:
        node_note = (
            "**node_exporter was not installed** (Debian: `apt-get install "
            "prometheus-node-exporter`), so this run has no comparison."
        )
    body = (
        f"## Scrape latency\n\n{today()} — {machine()}\n\n"
        f"{scrapes} gzip scrapes per row over HTTP on loopback, snapshots published every 1 s; "
        f"{node_note}\n\n" + table(["exporter", "series", "scrape every", "p50 ms", "p99 ms"], rows)
    )
    write_section("scrape-latency", body)
    return body


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
