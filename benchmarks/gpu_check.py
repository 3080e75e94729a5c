"""On a GPU machine: xmon's NVML numbers beside nvidia-smi's, `xmon ls`, and a /metrics excerpt.

    python benchmarks/gpu_check.py             # print the report
    python benchmarks/gpu_check.py --job       # also attach a JAX job on GPU 0 (PJRT vs NVML)
    python benchmarks/gpu_check.py --write     # and store it in docs/benchmarks.md

nvidia-smi is read just before and just after xmon's NVML pass, so a number that moves (power,
clocks, utilisation) is shown with both readings around xmon's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xmon.collectors import CollectContext
from xmon.collectors.nvml import NvmlCollector
from xmon.model import Device

from common import machine, table, today, write_section
from support.procs import Daemon, Proc, base_env, spawn, start_daemon, wait_for

MIB = 2**20
# (nvidia-smi --query-gpu field, how to read the same number from xmon's Device)
FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "device_kind"),
    ("uuid", "uuid"),
    ("pci.bus_id", "pci_bus_id"),
    ("memory.total", "memory_total_bytes/MiB"),
    ("memory.reserved", "memory_reserved_bytes/MiB"),
    ("memory.used", "memory_used_bytes/MiB"),
    ("utilization.gpu", "utilization_ratio*100"),
    ("utilization.memory", "memory_busy_ratio*100"),
    ("power.draw", "power_watts"),
    ("power.limit", "power_limit_watts"),
    ("temperature.gpu", "temperature_celsius"),
    ("clocks.sm", "sm_clock_hertz/1e6"),
    ("clocks.mem", "memory_clock_hertz/1e6"),
)
# counters nvidia-smi --query-gpu has no field for (GPM ratios, throughput, error counters)
XMON_ONLY = (
    "sm_active_ratio",
    "sm_occupancy_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "pcie_tx_bytes_per_second",
    "pcie_rx_bytes_per_second",
    "nvlink_tx_bytes_per_second",
    "nvlink_rx_bytes_per_second",
    "energy_joules_total",
    "ecc_corrected_errors_total",
    "ecc_uncorrected_errors_total",
    "xid_errors_total",
)
JOB_SCRIPT = """
import time, jax, jax.numpy as jnp
x = jnp.ones((256, 1024, 1024), jnp.float32)  # 1 GiB live on GPU 0
step = jax.jit(lambda a: a * 1.0001)
end = time.time() + {seconds}
while time.time() < end:
    x = step(x); x.block_until_ready(); time.sleep(0.05)
"""


def smi(fields: list[str]) -> list[dict[str, str]]:
    """One nvidia-smi query; a field this nvidia-smi does not know reads as "[N/A]"."""
    out: list[dict[str, str]] = []
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(result.stdout.strip() or result.stderr.strip())
    for line in result.stdout.strip().splitlines():
        out.append(dict(zip(fields, (v.strip() for v in line.split(",")), strict=True)))
    return out


def supported_fields() -> list[str]:
    """The FIELDS this nvidia-smi can query (memory.reserved needs driver 510 or later)."""
    ok = []
    for name, _ in FIELDS:
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={name}", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        if probe.returncode == 0:
            ok.append(name)
    return ok


def xmon_value(device: Device, spec: str) -> str:
    """The xmon number matching an nvidia-smi field, in nvidia-smi's unit."""
    match = re.fullmatch(r"(\w+)(?:([*/])(\w+(?:\.\w+)?))?", spec)
    assert match, spec
    attr, op, factor = match.groups()
    source = device if hasattr(device, attr) else device.hardware
    value = getattr(source, attr)
    if value is None or op is None:
        return "—" if value is None else str(value)
    scale = MIB if factor == "MiB" else float(factor)
    number = value * scale if op == "*" else value / scale
    return f"{number:.2f}".rstrip("0").rstrip(".")


def comparison(fields: list[str]) -> str:
    """nvidia-smi before, xmon's NVML pass, nvidia-smi after: one table per GPU."""
    collector = NvmlCollector()
    collector.collect(CollectContext(monotonic=time.monotonic()))  # primes rates and GPM
    time.sleep(1.0)  # one period, so the rates and GPM ratios cover a full second
    before = smi(fields)
    devices = collector.collect(CollectContext(monotonic=time.monotonic())).devices
    after = smi(fields)
    collector.close()
    parts = []
    for device in devices:
        rows = [
            (name, before[device.index].get(name, ""), xmon_value(device, spec),
             after[device.index].get(name, ""))
            for name, spec in FIELDS if name in fields
        ]  # fmt: skip
        header = ("nvidia-smi field", "nvidia-smi before", "xmon (NVML)", "nvidia-smi after")
        extra = ", ".join(f"`{n}` {getattr(device.hardware, n)}" for n in XMON_ONLY)
        parts.append(f"GPU {device.index}:\n\n" + table(header, rows) + f"\n\nxmon only: {extra}")
    return "\n\n".join(parts) or "NVML found no GPU."


def run_text(cmd: list[str], daemon: Daemon) -> str:
    env = base_env(XMON_SOCKET=str(daemon.socket_path))
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    return (result.stdout + result.stderr).rstrip() + f"\n(exit {result.returncode})"


def ls_section(daemon: Daemon) -> str:
    """`xmon ls` as a user runs it, in both formats, through the running daemon."""
    xmon = [sys.executable, "-m", "xmon", "ls"]
    return (f"```\n$ xmon ls\n{run_text(xmon, daemon)}\n```\n\n"
            f"```\n$ xmon ls --json\n{run_text([*xmon, '--json'], daemon)}\n```")  # fmt: skip


def start_job(workdir: Path, daemon: Daemon, seconds: int) -> Proc:
    script = workdir / "gpu_job.py"
    script.write_text(JOB_SCRIPT.format(seconds=seconds))
    env = base_env(XMON_SOCKET=str(daemon.socket_path))
    cmd = [sys.executable, "-m", "xmon", "run", "--job-name", "gpu-check", "--period", "0.5",
           "--", sys.executable, str(script)]  # fmt: skip
    return spawn(cmd, workdir / "gpu_job.log", env)


def scrape_excerpt(daemon: Daemon, job: bool) -> str:
    """The device, process and job-memory series of one scrape (after they appear)."""
    wanted = re.compile(r"^xmon_(device_|collector_\w+\{collector=\"nvml\")"
                        + (r"|^xmon_job_device_memory_in_use_bytes" if job else ""))  # fmt: skip

    def lines() -> list[str]:
        found = [line for line in daemon.scrape().splitlines() if wanted.match(line)]
        ready = any(line.startswith("xmon_device_info") for line in found)
        if job:
            ready = ready and any(
                'job_name="gpu-check"' in line
                for line in found
                if line.startswith("xmon_device_process_memory")
            )
        return found if ready else []

    return "```\n" + "\n".join(wait_for(lines, 180, "GPU series in /metrics")) + "\n```"


def report(args: argparse.Namespace, workdir: Path) -> str:
    sections = [f"## GPU check\n\n{today()} — {machine()}",
                "### NVML beside nvidia-smi\n\nxmon's NVML pass between two nvidia-smi "
                "queries, each number in nvidia-smi's unit (MiB, %, W, °C, MHz).",
                comparison(supported_fields())]  # fmt: skip
    daemon = start_daemon(workdir, period=1.0)
    job = start_job(workdir, daemon, args.seconds) if args.job else None
    try:
        excerpt = scrape_excerpt(daemon, job is not None)
        sections += ["### xmon ls", ls_section(daemon)]
        sections += ["### /metrics excerpt" + (" (JAX job `gpu-check` on GPU 0)" if job else ""),
                     excerpt]  # fmt: skip
    finally:
        if job is not None:
            job.stop()
        daemon.stop()
    return "\n\n".join(sections)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", action="store_true", help="attach a JAX job on GPU 0")
    parser.add_argument("--seconds", type=int, default=300, help="how long the job runs")
    parser.add_argument("--write", action="store_true", help="store in docs/benchmarks.md")
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("gpu_check: nvidia-smi not found; run this on a machine with an NVIDIA GPU",
              file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory(prefix="xmon-gpu-check-") as tmp:
        body = report(args, Path(tmp))
    print(body)
    if args.write:
        write_section("gpu-check", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
