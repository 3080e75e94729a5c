"""``xmon ls``: rendering, then the real command, directly and through a real daemon.

Hardware is a fixture sysfs/procfs tree plus a fake libtpu metrics server (real gRPC); other
hardware collectors (nvml) are switched off so the results do not depend on this machine.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from xmon.cli.ls import Listing, cpu_devices_json, none_found, problems, rows_of
from xmon.cli.ls_render import (
    Holder,
    Row,
    memory_text,
    render_json,
    render_table,
    row_json,
    util_text,
)
from xmon.model import (
    CollectorHealth,
    Device,
    DeviceInfo,
    DeviceMemory,
    HardwareCounters,
    Job,
    JobDevice,
    RuntimeService,
)

from support.fakes.tpu_host import FIXTURES
from support.fakes.tpu_snapshot import TPU_DEVICE

GIB = 2**30
V5E = FIXTURES / "v5e-4"


# --- rendering -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "total", "text"),
    [(GIB, 16 * GIB, "1.00 GiB / 16.00 GiB"), (None, 16 * GIB, "- / 16.00 GiB"), (None, None, "-")],
)
def test_memory_text(used: int | None, total: int | None, text: str) -> None:
    assert memory_text(used, total) == text


def test_util_is_gpu_utilization_else_tpu_duty_cycle() -> None:
    counters = HardwareCounters(utilization_ratio=0.5, duty_cycle_ratio=0.9)
    gpu = Device(0, "gpu", "NVIDIA H100", "nvml", counters)
    assert util_text(gpu) == "50.0%"
    assert util_text(TPU_DEVICE) == "92.5%"
    assert util_text(replace(TPU_DEVICE, hardware=HardwareCounters())) == "-"


def test_table_and_wide_table() -> None:
    long = "python3 " + "x" * 60
    row = Row(TPU_DEVICE, (Holder(1000, long, "train"),), coords=(0, 1, 0))
    lines = render_table([row]).splitlines()
    assert lines[0].split() == ["DEVICE", "PLATFORM", "KIND", "MEMORY", "USED", "/", "TOTAL",
                                "UTIL", "COORDS", "PID", "COMMAND"]  # fmt: skip
    assert "20.00 GiB / 31.25 GiB" in lines[1] and "0x1x0" in lines[1]
    assert lines[1].endswith("...") and "[train] python3" in lines[1]
    wide = render_table([row], wide=True).splitlines()
    assert "PCI BDF" in wide[0] and "/dev/vfio/0" in wide[1] and wide[1].endswith("x" * 60)


def test_json_numbers_as_numbers_and_lists_not_null() -> None:
    rows = [Row(TPU_DEVICE), Row(Device(1, "gpu", "NVIDIA H100", "nvml", HardwareCounters()))]
    data = json.loads(render_json(rows))
    assert data[0]["memory_total_bytes"] == 33_550_229_504 and data[0]["numa_node"] == 0
    assert data[0]["duty_cycle_ratio"] == 0.925 and data[0]["coords"] == []
    assert data[1]["processes"] == [] and data[1]["coords"] == []
    assert data[1]["memory_used_bytes"] is None  # unknown is null, never 0
    assert json.loads(render_json([])) == []


def _job(pid: int, platform: str, n: int, coords: bool = False) -> Job:
    devices = tuple(
        JobDevice(DeviceInfo(i, platform, "x", local_hardware_id=i,
                             coords=(i, 0, 0) if coords else None), DeviceMemory())
        for i in range(n)
    )  # fmt: skip
    return Job("train", pid, "h", platform, "0.7", "0.7", argv=("python3", "t.py"), devices=devices)


def test_rows_join_jobs_for_commands_and_coords() -> None:
    device = replace(TPU_DEVICE, index=1, pids=(1000, 4242))
    listing = Listing((device,), "test", jobs=(_job(1000, "tpu", 4, coords=True),))
    (row,) = rows_of(listing, V5E / "proc")
    assert row.coords == (1, 0, 0)
    assert row.holders == (Holder(1000, "python3 t.py", "train"),
                           Holder(4242, "python3 train.py --config llama.yaml"))  # fmt: skip


def test_none_found_says_where_the_cpu_count_comes_from() -> None:
    assert none_found(Listing((), "direct", cpu_count=8)) == (
        "no TPU/GPU found; no JAX job attached (8 host CPUs)")  # fmt: skip
    assert cpu_devices_json(Listing((), "direct", cpu_count=8)) == []
    listing = Listing((), "daemon", jobs=(_job(77, "cpu", 4),), cpu_count=2)
    assert (
        none_found(listing) == "no TPU/GPU found; 4 CPU devices (JAX devices of job train (pid 77))"
    )
    listed = cpu_devices_json(listing)  # --json lists the devices the text counts
    assert len(listed) == 4 and {d["platform"] for d in listed} == {"cpu"}
    assert listed[0]["processes"][0]["pid"] == 77
    assert set(listed[0]) == set(row_json(rows_of(Listing((TPU_DEVICE,), "t"), V5E / "proc")[0]))


def test_problems() -> None:
    listing = Listing((), "x", services=(RuntimeService("tpu", "localhost:8431", False, "nope"),),
                      health=(CollectorHealth("tpu", False, 1, None, "boom"),
                              CollectorHealth("nvml", True, present=False)))  # fmt: skip
    errors, notes = problems(listing)
    assert errors == ["collector tpu failed: boom"]
    assert notes and "localhost:8431 not answering (nope)" in notes[0]
