"""On a GPU machine: xmon's daemon beside nvitop-exporter, in the same run and on the same GPUs.

nvitop-exporter is the Python GPU exporter users pick (``pip install 'xmon[bench]'`` installs
it). Both run with a 1 s update interval and are scraped like Prometheus (gzip), first every
15 s (the common scrape interval) and then every 1 s (each scrape wants fresh readings). Each
window measures both processes' CPU over the same seconds; RSS is read at the end; scrape
latency is timed with both scraped alternately, so a noisy moment hits both.

    python benchmarks/gpu_exporters.py            # nvitop-exporter must be installed
    python benchmarks/gpu_exporters.py --quick
    python benchmarks/gpu_exporters.py --other 'CMD --port {port}'   # another exporter

Budgets: idle CPU at most half of nvitop-exporter's, RSS below its, scrape p99 no worse.
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

from common import cpu_seconds, machine, summary, table, today, write_section
from daemon_cost import memory, scraped_every, spread
from scrape_latency import count_series, scrape
from support.procs import Proc, base_env, free_port, spawn, start_daemon, wait_for

NVITOP_EXPORTER = "{python} -m nvitop_exporter --bind-address 127.0.0.1 --port {port} --interval 1"


def other_command(template: str | None) -> list[str] | None:
    """The comparison exporter's command line, or None when nvitop-exporter is missing."""
    if template is None:
        if importlib.util.find_spec("nvitop_exporter") is None:
            return None
        template = NVITOP_EXPORTER
    return [part.replace("{python}", sys.executable) for part in shlex.split(template)]


def cpu_side_by_side(
    processes: dict[str, psutil.Process], windows: int, seconds: float
) -> dict[str, list[float]]:
    """% of a core per window, every process measured over the same window."""
    result: dict[str, list[float]] = {name: [] for name in processes}
    for _ in range(windows):
        before = {name: cpu_seconds(p) for name, p in processes.items()}
        time.sleep(seconds)
        for name, process in processes.items():
            result[name].append(100.0 * (cpu_seconds(process) - before[name]) / seconds)
    return result


def scrape_side_by_side(
    urls: dict[str, str], scrapes: int, interval: float
) -> dict[str, dict[str, float]]:
    """Latency summaries, the exporters scraped alternately ``interval`` apart."""
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(scrapes):
        for name, url in urls.items():
            latencies[name].append(scrape(url)[0])
        time.sleep(interval)
    return {name: summary(values) for name, values in latencies.items()}


def start_other(command: list[str], port: int, workdir: Path) -> tuple[Proc, str]:
    command = [part.replace("{port}", str(port)) for part in command]
    proc = spawn(command, workdir / "other.log", base_env())
    url = f"http://127.0.0.1:{port}/metrics"

    def serving() -> bool:
        if not proc.alive():
            raise AssertionError(f"{command[0]} exited:\n{proc.log()}")
        return bool(scrape(url))

    wait_for(serving, 60, f"{' '.join(command)} to serve /metrics")
    return proc, url


def measure(other: list[str], quick: bool) -> tuple[list[list[object]], str]:
    windows, seconds, scrapes = (1, 5.0, 20) if quick else (5, 20.0, 200)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        daemon = start_daemon(workdir / "xmon", period=1.0, extra_args=["--no-collector.tpu"])
        other_proc, other_url = start_other(other, free_port(), workdir)
        urls = {"xmon": daemon.metrics_url, "other": other_url}
        processes = {
            "xmon": psutil.Process(daemon.popen.pid),
            "other": psutil.Process(other_proc.popen.pid),
        }
        try:
            time.sleep(3)
            series = {name: count_series(url) for name, url in urls.items()}
            cpu: dict[float, dict[str, list[float]]] = {}
            for every in (15.0, 1.0):
                with scraped_every(urls["xmon"], every), scraped_every(urls["other"], every):
                    cpu[every] = cpu_side_by_side(processes, windows, seconds)
            rss = {name: memory(process) for name, process in processes.items()}
            latency = scrape_side_by_side(urls, scrapes, 0.25 if quick else 1.0)
        finally:
            other_proc.stop()
            daemon.stop()
    rows: list[list[object]] = [["series", series["xmon"], series["other"], "same devices"]]
    for every, by_name in cpu.items():
        budget = "≤ half of its" if every == 15.0 else ""
        rows.append(
            [f"CPU idle, 1 s updates, scraped every {every:g} s"]
            + [spread(by_name[name]) for name in ("xmon", "other")]
            + [budget]
        )
    rows.append(["RSS (USS)", rss["xmon"], rss["other"], "below its"])
    for stat in ("median", "p99"):
        rows.append(
            [f"scrape {stat} (gzip)"]
            + [f"{latency[name][stat] * 1e3:.1f} ms" for name in ("xmon", "other")]
            + ["no worse" if stat == "p99" else ""]
        )
    note = f"{windows} windows of {seconds:g} s per row, {scrapes} scrapes each"
    return rows, note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short windows: checks it runs")
    parser.add_argument(
        "--other", metavar="CMD",
        help="the exporter to compare with, {port} in place of its port (default nvitop-exporter)",
    )  # fmt: skip
    parser.add_argument("--name", default="the other exporter", help="its name in the table")
    args = parser.parse_args()
    if args.other is None and shutil.which("nvidia-smi") is None:
        print("gpu_exporters: skipped, no NVIDIA GPU here (nvidia-smi not found)")
        return 0
    other = other_command(args.other)
    if other is None:
        print(
            "gpu_exporters: skipped, nvitop-exporter is not installed (pip install 'xmon[bench]')"
        )
        return 0
    rows, note = measure(other, args.quick)
    name = "nvitop-exporter" if args.other is None else args.name
    body = (
        f"## GPU exporters side by side\n\n{today()} — {machine()}\n\n"
        f"`xmon daemon` (host and nvml collectors) and {name}, both updating every 1 s, on the "
        f"same GPUs in the same run; {note}. CPU is % of one core, median (min-max).\n\n"
        + table(["measure", "xmon", name, "budget"], rows)
    )
    write_section("gpu-exporters", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
