"""The nvml collector on a real NVIDIA GPU (skipped without one).

xmon's NVML pass is taken between two ``nvidia-smi --query-gpu`` calls; every number must match
or lie within what nvidia-smi read just before and just after. Then a JAX job on GPU 0 with the
agent attached shows both memories: PJRT's live bytes and NVML's (preallocated) process bytes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from xmon.collectors import CollectContext
from xmon.collectors.nvml import NvmlCollector, load_pynvml
from xmon.model import Device

from support.procs import Daemon, base_env, spawn, start_daemon, wait_for

MIB = 2**20
GIB = 2**30


def _gpu_count() -> int:
    nv = load_pynvml()
    if nv is None or shutil.which("nvidia-smi") is None:
        return 0
    try:
        nv.nvmlInit()
    except nv.NVMLError:
        return 0
    try:
        return int(nv.nvmlDeviceGetCount())
    finally:
        nv.nvmlShutdown()


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.e2e,  # nvidia-smi, as the reference
    pytest.mark.skipif(_gpu_count() == 0, reason="needs an NVIDIA GPU, its driver and nvidia-smi"),
]

FIELDS = ["index", "name", "uuid", "pci.bus_id", "memory.total", "memory.used",
          "power.limit", "temperature.gpu", "power.draw", "clocks.sm", "clocks.mem",
          "utilization.gpu"]  # fmt: skip


def smi() -> list[dict[str, str]]:
    cmd = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    return [dict(zip(FIELDS, (v.strip() for v in line.split(",")), strict=True))
            for line in out.strip().splitlines()]  # fmt: skip


def between(value: float | None, readings: list[str], slack: float) -> bool:
    """``value`` within ``slack`` of the range nvidia-smi read around it ([N/A] passes None)."""
    numbers = [float(r) for r in readings if r not in ("[N/A]", "[Not Supported]")]
    if not numbers:
        return value is None
    return value is not None and min(numbers) - slack <= value <= max(numbers) + slack


@pytest.fixture
def sampled() -> Iterator[tuple[list[Device], list[dict[str, str]], list[dict[str, str]]]]:
    collector = NvmlCollector()
    collector.collect(CollectContext(monotonic=time.monotonic()))
    before = smi()
    devices = list(collector.collect(CollectContext(monotonic=time.monotonic())).devices)
    after = smi()
    collector.close()
    yield devices, before, after


def test_every_gpu_nvidia_smi_lists_is_found(sampled: tuple[list[Device], list, list]) -> None:
    devices, before, _ = sampled
    assert [d.index for d in devices] == [int(row["index"]) for row in before]


def test_static_facts_match_nvidia_smi(sampled: tuple[list[Device], list, list]) -> None:
    devices, before, _ = sampled
    for device in devices:
        row = before[device.index]
        assert (device.device_kind, device.uuid) == (row["name"], row["uuid"])
        assert device.pci_bus_id is not None
        assert device.pci_bus_id.lower() == row["pci.bus_id"].lower()
        total = device.hardware.memory_total_bytes
        assert total is not None and total // MIB == int(row["memory.total"])
        assert between(device.hardware.power_limit_watts, [row["power.limit"]], 1.0)


def test_live_numbers_lie_between_two_nvidia_smi_readings(
    sampled: tuple[list[Device], list, list],
) -> None:
    devices, before, after = sampled
    for device in devices:
        hw, rows = device.hardware, (before[device.index], after[device.index])

        def seen(field: str) -> list[str]:
            return [row[field] for row in rows]  # noqa: B023 - used at once

        used = None if hw.memory_used_bytes is None else hw.memory_used_bytes / MIB
        assert between(used, seen("memory.used"), 64), (used, seen("memory.used"))
        assert between(hw.temperature_celsius, seen("temperature.gpu"), 3)
        assert between(hw.power_watts, seen("power.draw"), 30)
        sm = None if hw.sm_clock_hertz is None else hw.sm_clock_hertz / 1e6
        assert between(sm, seen("clocks.sm"), 200)
        mem = None if hw.memory_clock_hertz is None else hw.memory_clock_hertz / 1e6
        assert between(mem, seen("clocks.mem"), 200)
        util = None if hw.utilization_ratio is None else hw.utilization_ratio * 100
        assert between(util, seen("utilization.gpu"), 25)


# --- a JAX job on the GPU ---------------------------------------------------------------------

JOB = """
import time, jax, jax.numpy as jnp
assert jax.default_backend() == "gpu", jax.default_backend()
x = jnp.ones((256, 1024, 1024), jnp.float32)  # 1 GiB live
step = jax.jit(lambda a: a * 1.0001)
while True:
    x = step(x); x.block_until_ready(); time.sleep(0.05)
"""


def gpu_env(**extra: str) -> dict[str, str]:
    """JAX's defaults: platform picked by JAX, preallocation on (whatever this shell says)."""
    env = base_env(XLA_PYTHON_CLIENT_PREALLOCATE="true", **extra)
    for name in (
        "JAX_PLATFORMS",
        "XLA_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_ALLOCATOR",
    ):
        env.pop(name, None)
    return env


def _jax_has_gpu() -> bool:
    probe = "import jax; print(jax.default_backend())"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=300, env=gpu_env())  # fmt: skip
    return result.stdout.strip() == "gpu"


def _series(text: str, name: str, job: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'job_name="{job}"' in line and 'device="0"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_jax_job_shows_pjrt_and_nvml_memory(tmp_path: Path) -> None:
    if not _jax_has_gpu():
        pytest.skip("this Python's jax has no GPU backend")
    daemon: Daemon = start_daemon(tmp_path / "daemon", period=0.5)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    cmd = [sys.executable, "-m", "xmon", "run", "--job-name", "gpujob", "--period", "0.5", "--",
           sys.executable, str(script)]  # fmt: skip
    job = spawn(cmd, tmp_path / "job.log", gpu_env(XMON_SOCKET=str(daemon.socket_path)))
    try:
        names = ("xmon_device_process_memory_used_bytes", "xmon_job_device_memory_in_use_bytes")

        def both() -> tuple[float, float] | None:
            assert job.alive(), job.log()
            text = daemon.scrape()
            nvml, pjrt = (_series(text, name, "gpujob") for name in names)
            return (nvml, pjrt) if nvml is not None and pjrt is not None and pjrt >= GIB else None

        nvml, pjrt = wait_for(both, 300, "the job's NVML and PJRT memory in /metrics")
    finally:
        job.stop()
        daemon.stop()
    total = _total_of_gpu0()
    print(f"\nGPU 0: NVML process memory {nvml / GIB:.2f} GiB, PJRT bytes_in_use {pjrt / GIB:.2f} "
          f"GiB, total {total / GIB:.2f} GiB")  # fmt: skip
    assert GIB <= pjrt < nvml  # the allocator's live bytes sit inside what NVML sees it hold
    assert nvml > 0.5 * total  # JAX's default preallocation takes 75 % of the card


def _total_of_gpu0() -> float:
    collector = NvmlCollector()
    try:
        device = collector.collect(CollectContext(monotonic=time.monotonic())).devices[0]
    finally:
        collector.close()
    assert device.hardware.memory_total_bytes is not None
    return float(device.hardware.memory_total_bytes)
