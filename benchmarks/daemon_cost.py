"""Daemon cost: start to first scrape, RSS, CPU when idle and under fan-in (64 agents × 10 Hz).

CPU is the daemon process's user+system time over the window (psutil), as % of one core.
Lost reports = reports the agents' transports handed to gRPC minus reports the daemon counted.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from common import REPO, machine, summary, table, today, write_section
from support.procs import base_env, free_port, start_daemon, wait_for

SCRAPE_INTERVAL = 15.0  # Prometheus' common scrape interval, during every CPU window


def start_to_first_scrape(workdir: Path) -> float:
    port = free_port()
    socket = workdir / f"s{port}.sock"
    cmd = [
        sys.executable,
        "-m",
        "xmon",
        "daemon",
        "--listen",
        f"127.0.0.1:{port}",
        "--socket",
        str(socket),
        "--no-collector.nvml",
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=base_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def scraped() -> bool:
        with urllib.request.urlopen(url, timeout=2) as response:
            return b"xmon_up 1.0" in response.read()

    try:
        wait_for(scraped, 30, "the first successful scrape", interval=0.005)
        return time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(10)


def cpu_percent_over(process: psutil.Process, seconds: float) -> float:
    before = process.cpu_times()
    time.sleep(seconds)
    after = process.cpu_times()
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / seconds


def cpu_windows(process: psutil.Process, windows: int, seconds: float) -> list[float]:
    return [cpu_percent_over(process, seconds) for _ in range(windows)]


def spread(values: list[float], digits: int = 2) -> str:
    """``median % (min-max)`` of repeated CPU windows."""
    s = summary(values)
    return f"{s['median']:.{digits}f} % ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def memory(process: psutil.Process) -> str:
    info = process.memory_full_info()
    return f"{info.rss / 2**20:.1f} MiB (USS {info.uss / 2**20:.1f})"


def received(daemon_url: str) -> float:
    with urllib.request.urlopen(daemon_url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("xmon_daemon_reports_received_total "):
                return float(line.split()[1])
    return 0.0


def load(socket: Path, agents: int, rate: float, seconds: float) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        str(REPO / "benchmarks" / "loadgen.py"),
        str(socket),
        str(agents),
        str(rate),
        str(seconds),
    ]
    return subprocess.Popen(cmd, env=base_env(), cwd=REPO, stdout=subprocess.PIPE, text=True)


@contextlib.contextmanager
def scraped_every(url: str, seconds: float) -> Iterator[None]:
    """A Prometheus-like scraper in the background (gzip, like Prometheus asks for)."""
    stop = threading.Event()

    def scrape_loop() -> None:
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        while not stop.wait(seconds):
            with urllib.request.urlopen(request, timeout=10) as response:
                response.read()

    thread = threading.Thread(target=scrape_loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(15)


def under_load(
    workdir: Path, agents: int, rate: float, windows: int, seconds: float, args: list[str]
) -> dict[str, Any]:
    # The simulated agents all live in one process, so each claims a pid no process holds:
    # the daemon checks no claim here (a real job's claim costs what benchmarks/pid_checks.py
    # measures).
    daemon = start_daemon(workdir / f"load{agents}x{rate}", period=1.0, extra_args=args,
                          env={"XMON_VERIFY_PIDS": "off"})  # fmt: skip
    process = psutil.Process(daemon.popen.pid)
    try:
        before = received(daemon.metrics_url)
        generator = load(daemon.socket_path, agents, rate, windows * seconds + 4)
        time.sleep(3)  # connected and warm
        with scraped_every(daemon.metrics_url, SCRAPE_INTERVAL):
            cpu = cpu_windows(process, windows, seconds)
        out, _ = generator.communicate(timeout=windows * seconds + 60)
        sent = json.loads(out.strip().splitlines()[-1])
        if not sent["sent"]:  # refused agents would make an idle daemon look like a loaded one
            raise RuntimeError(f"the daemon took no report of the {agents} agents: {sent}\n"
                               + daemon.log()[-2000:])  # fmt: skip
        time.sleep(1.5)
        lost = sent["sent"] - (received(daemon.metrics_url) - before)
        rss = memory(process)
    finally:
        daemon.stop()
    return {"cpu": cpu, "rss": rss, "sent": sent["sent"], "dropped": sent["dropped"], "lost": lost}


def grpc_floor(
    workdir: Path,
    agents: int,
    rate: float,
    windows: int,
    seconds: float,
    libraries: list[str] | None = None,
) -> dict[str, Any]:
    """CPU and memory of a server that only reads the same load (benchmarks/grpc_floor.py);
    ``libraries`` (``--libraries [TPU_ADDRESS]``) makes it hold the daemon's other libraries."""
    socket = workdir / f"floor{agents}x{rate:g}.sock"
    server = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "grpc_floor.py"), str(socket),
         *(libraries or ())],
        env=base_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        process = psutil.Process(server.pid)
        generator = load(socket, agents, rate, windows * seconds + 4)
        time.sleep(3)
        cpu = cpu_windows(process, windows, seconds)
        generator.communicate(timeout=windows * seconds + 60)
        rss = memory(process)
    finally:
        server.kill()
        server.wait(10)
    return {"cpu": cpu, "rss": rss}


def main(quick: bool = False) -> str:
    from support.fakes.libtpu_server import FakeLibtpu, scenario

    windows, seconds = (1, 5.0) if quick else (5, 10.0)
    # An idle daemon uses a few ms of CPU a second and the kernel counts it in 10 ms ticks:
    # longer windows for the idle figures.
    idle_seconds = seconds if quick else 20.0
    no_hardware = ["--no-collector.tpu", "--no-collector.nvml"]
    with tempfile.TemporaryDirectory() as tmp, FakeLibtpu(scenario("v6e", 8)) as tpu:
        workdir = Path(tmp)
        starts = [start_to_first_scrape(workdir) for _ in range(2 if quick else 7)]
        idle_daemon = start_daemon(workdir / "idle", period=1.0, extra_args=no_hardware)
        try:
            time.sleep(2)
            idle_process = psutil.Process(idle_daemon.popen.pid)
            with scraped_every(idle_daemon.metrics_url, SCRAPE_INTERVAL):
                idle_alone = cpu_windows(idle_process, windows, idle_seconds)
            idle_rss = memory(idle_process)
        finally:
            idle_daemon.stop()
        with_tpu = ["--no-collector.nvml", "--tpu-metrics-address", tpu.address]
        idle = under_load(workdir, 4, 1.0, windows, idle_seconds, with_tpu)
        idle_floor = grpc_floor(
            workdir, 4, 1.0, windows, idle_seconds, ["--libraries", tpu.address]
        )
        fan_in = under_load(workdir, 64, 10.0, windows, seconds, no_hardware)
        floor = grpc_floor(workdir, 64, 10.0, windows, seconds)
    start = summary(starts)
    rows = [
        [
            "start → first successful scrape",
            f"{start['median'] * 1e3:.0f} ms (max {start['max'] * 1e3:.0f})",
            "< 500 ms",
        ],
        ["CPU idle, no agents, host collector only (1 s period)", spread(idle_alone), ""],
        ["RSS idle, no agents", idle_rss, "< 50 MB"],
        ["CPU idle, 8 TPU devices (fake libtpu), 4 agents at 1 Hz", spread(idle["cpu"]),
         "< 0.5 %"],
        ["same 4 agents on a grpc.aio server that only reads, holding the daemon's "
         "libraries (`grpc_floor.py --libraries`)", spread(idle_floor["cpu"]), ""],
        ["RSS with 4 agents (TensorBoard writer loaded)", idle["rss"], "< 50 MB"],
        ["RSS of that server: Python, gRPC (server and libtpu client), prometheus_client, "
         "psutil, protobuf, before any xmon work", idle_floor["rss"], ""],
        ["CPU, 64 agents × 10 Hz", spread(fan_in["cpu"], 1), "< 10 %"],
        ["same load on a grpc.aio server that only reads (`grpc_floor.py`)",
         spread(floor["cpu"], 1), ""],
        [
            "reports sent / lost, 64 × 10 Hz",
            f"{fan_in['sent']:.0f} / {fan_in['lost']:.0f} "
            f"(agent-side drops {fan_in['dropped']:.0f})",
            "0 lost",
        ],
        ["RSS with 64 agents", fan_in["rss"], ""],
    ]  # fmt: skip
    body = (
        f"## Daemon cost\n\n{today()} — {machine()}\n\n"
        "Real `xmon daemon`; agents simulated with the agent's own transport "
        "(`benchmarks/loadgen.py`, 4-device reports); the 8 TPU devices are the fake libtpu "
        "metrics server (`tests/support/fakes/libtpu_server.py`, v6e-8, polled as a real one). "
        f"CPU is the daemon's user+system time: median (min-max) of {windows} windows of "
        f"{idle_seconds:.0f} s idle and {seconds:.0f} s under fan-in, scraped every "
        f"{SCRAPE_INTERVAL:.0f} s meanwhile. RSS counts the shared "
        "libraries' pages; USS (in brackets) is the memory only the daemon holds. The load "
        "generator shares the machine's cores with the daemon.\n\n"
        + table(["measure", "result", "budget"], rows)
    )
    write_section("daemon-cost", body)
    return body


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
