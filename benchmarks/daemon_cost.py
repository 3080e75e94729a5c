"""Daemon cost: start to first scrape, RSS, CPU when idle and under fan-in (64 agents × 10 Hz).

CPU is the daemon process's user+system time over the window (psutil), as % of one core.
Lost reports = reports the agents' transports handed to gRPC minus reports the daemon counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from common import REPO, machine, summary, table, today, write_section
from procs import base_env, free_port, start_daemon, wait_for


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


def under_load(workdir: Path, agents: int, rate: float, seconds: float) -> dict[str, float]:
    daemon = start_daemon(workdir / f"load{agents}x{rate}", period=1.0)
    process = psutil.Process(daemon.popen.pid)
    try:
        before = received(daemon.metrics_url)
        generator = load(daemon.socket_path, agents, rate, seconds + 4)
        time.sleep(3)  # connected and warm
        cpu = cpu_percent_over(process, seconds)
        out, _ = generator.communicate(timeout=seconds + 60)
        sent = json.loads(out.strip().splitlines()[-1])
        time.sleep(1.5)
        lost = sent["sent"] - (received(daemon.metrics_url) - before)
        rss = process.memory_info().rss / 2**20
    finally:
        daemon.stop()
    return {"cpu": cpu, "rss": rss, "sent": sent["sent"], "dropped": sent["dropped"], "lost": lost}


def main(quick: bool = False) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        starts = [start_to_first_scrape(workdir) for _ in range(2 if quick else 7)]
        window = 5.0 if quick else 30.0
        idle_daemon = start_daemon(workdir / "idle", period=1.0)
        try:
            time.sleep(2)
            idle_process = psutil.Process(idle_daemon.popen.pid)
            idle_alone = cpu_percent_over(idle_process, window)
            idle_rss = idle_process.memory_info().rss / 2**20
        finally:
            idle_daemon.stop()
        idle = under_load(workdir, 4, 1.0, window)
        fan_in = under_load(workdir, 64, 10.0, window)
    start = summary(starts)
    rows = [
        [
            "start → first successful scrape",
            f"{start['median'] * 1e3:.0f} ms (max {start['max'] * 1e3:.0f})",
            "< 500 ms",
        ],
        ["CPU idle, no agents (1 s period)", f"{idle_alone:.2f} % of a core", ""],
        ["RSS idle, no agents", f"{idle_rss:.1f} MiB", "< 50 MB"],
        ["CPU idle, 4 agents at 1 Hz", f"{idle['cpu']:.2f} % of a core", "< 0.5 %"],
        ["RSS with 4 agents (TensorBoard writer loaded)", f"{idle['rss']:.1f} MiB", "< 50 MB"],
        ["CPU, 64 agents × 10 Hz", f"{fan_in['cpu']:.1f} % of a core", "< 10 %"],
        [
            "reports sent / lost, 64 × 10 Hz",
            f"{fan_in['sent']:.0f} / {fan_in['lost']:.0f} "
            f"(agent-side drops {fan_in['dropped']:.0f})",
            "0 lost",
        ],
        ["RSS with 64 agents", f"{fan_in['rss']:.1f} MiB", ""],
    ]
    body = (
        f"## Daemon cost\n\n{today()} — {machine()}\n\n"
        f"Real `xmon daemon` (host collector on); agents simulated with the agent's own transport "
        f"(`benchmarks/loadgen.py`, 4-device reports); CPU measured over {window:.0f} s. The load "
        "generator shares the machine's 2 cores with the daemon.\n\n"
        + table(["measure", "result", "budget"], rows)
    )
    write_section("daemon-cost", body)
    return body


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
