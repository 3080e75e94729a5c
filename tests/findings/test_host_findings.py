"""Host findings: the detectors fed by the real collectors on fixture hosts (the tpu collector on
fixture sysfs/procfs trees with and without a fake libtpu metrics server; the nvml collector
on the NVML fake), and the daemon-side tracker's facts and dates."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from xmon.collectors.base import CollectContext, CollectorOutput
from xmon.collectors.nvml import NvmlCollector
from xmon.collectors.tpu import TpuCollector
from xmon.findings.host import (
    HostFacts,
    HostFindings,
    detect_host,
    gpu_preallocated,
    nvidia_nodes,
    nvml_missing,
    tpu_metrics_unreachable,
)
from xmon.model import (
    CollectorHealth,
    DaemonStats,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Snapshot,
)

from support.fakes.libtpu_server import Fakes, scenario
from support.fakes.tpu_host import FIXTURES, HOSTS, write_host
from support.nvml_fake import MIB, FakeNvml, h100

GIB = 2**30


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    started = Fakes()
    yield started
    started.stop()


def snap(out: CollectorOutput, *health: CollectorHealth, jobs: tuple[Job, ...] = ()) -> Snapshot:
    return Snapshot(1, 1_700_000_000.0, 5.0, "node0", DaemonStats("0", 0.0), devices=out.devices,
                    runtime_services=out.runtime_services, collectors=health,
                    jobs=jobs)  # fmt: skip


def gpu_job(pid: int, platform: str = "gpu", in_use: int | None = 2 * GIB, peak: int = 3 * GIB,
            pool: int | None = 60 * GIB) -> Job:  # fmt: skip
    memory = DeviceMemory(bytes_in_use=in_use, peak_bytes_in_use=peak, bytes_limit=pool,
                          pool_bytes=pool)  # fmt: skip
    device = JobDevice(DeviceInfo(0, platform, "NVIDIA H100 80GB HBM3", local_hardware_id=0),
                       memory)  # fmt: skip
    return Job("train", pid, "node0", platform, "0.10", "0.10", devices=(device,))


def tpu_job(pid: int) -> Job:
    device = JobDevice(DeviceInfo(0, "tpu", "TPU v5 lite", local_hardware_id=0), DeviceMemory())
    return Job("train", pid, "node0", "tpu", "0.10", "0.10", devices=(device,))


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- libtpu runtime metrics ------------------------------------------------------------------


def tpu_tick(root: Path, *addresses: str) -> CollectorOutput:
    collector = TpuCollector(root / "sys", root / "proc", tuple(addresses))
    try:
        return collector.collect(CollectContext())
    finally:
        collector.close()


def test_chips_held_and_no_metrics_service_names_the_port_variable() -> None:
    out = tpu_tick(FIXTURES / "v5e-4", f"localhost:{_closed_port()}")
    finding = tpu_metrics_unreachable(snap(out, CollectorHealth("tpu", True)), since=0.0)
    assert finding is not None and finding.severity == "warning"
    assert "TPU_RUNTIME_METRICS_PORTS=8431" in finding.fix
    evidence = dict(finding.evidence)
    assert evidence["TPU chips"] == "4" and evidence["processes holding chips"] == "4242"
    assert evidence["tpu collector"] == "running"
    (service,) = out.runtime_services
    assert evidence[f"service {service.address}"].startswith("unavailable")


def test_a_metrics_service_that_answers_is_no_finding(fakes: Fakes) -> None:
    fake = fakes(scenario("v5e", 4))
    out = tpu_tick(FIXTURES / "v5e-4", fake.address)
    assert out.runtime_services[0].up
    assert tpu_metrics_unreachable(snap(out, CollectorHealth("tpu", True)), 0.0) is None


def test_chips_nobody_holds_are_no_finding(tmp_path: Path) -> None:
    """No process has libtpu up: nothing would serve metrics, nothing to say."""
    write_host(tmp_path, replace(HOSTS["v5e-4"], procs=()))
    out = tpu_tick(tmp_path, f"localhost:{_closed_port()}")
    assert tpu_metrics_unreachable(snap(out, CollectorHealth("tpu", True)), 0.0) is None


def test_a_tpu_job_with_the_collector_off_says_to_enable_it() -> None:
    finding = tpu_metrics_unreachable(snap(CollectorOutput(), jobs=(tpu_job(9),)), 0.0)
    assert finding is not None and "--collector.tpu" in finding.fix
    assert dict(finding.evidence)["jobs on TPU"] == "train (pid 9)"
    assert dict(finding.evidence)["tpu collector"] == "off"


# --- NVML absent or failing ------------------------------------------------------------------


def nvml_tick(nv: FakeNvml | None) -> tuple[CollectorOutput, CollectorHealth]:
    collector = NvmlCollector(nv, load=lambda: None)
    out = collector.collect(CollectContext(monotonic=1.0))
    collector.close()
    return out, CollectorHealth("nvml", True, present=out.present)


def test_device_nodes_without_nvml_name_what_is_missing() -> None:
    out, health = nvml_tick(None)  # no driver library, no nvidia-ml-py
    assert not out.present
    facts = HostFacts(("/dev/nvidia0", "/dev/nvidia1"), nvml_library=False,
                      pynvml_installed=False)  # fmt: skip
    finding = nvml_missing(snap(out, health), facts, 0.0)
    assert finding is not None and finding.kind == "nvml_unavailable"
    assert "gives no device" in finding.summary
    assert "xmon[gpu]" in finding.fix and "libnvidia-ml.so.1" in finding.fix
    evidence = dict(finding.evidence)
    assert evidence["NVIDIA device nodes"] == "/dev/nvidia0, /dev/nvidia1"
    assert evidence["nvml collector"] == "finds nothing on this host"


def test_nvml_that_fails_at_init_beside_a_gpu_job() -> None:
    import pynvml

    out, _ = nvml_tick(FakeNvml([h100(0)], init_error=pynvml.NVMLError_NoPermission))
    failing = CollectorHealth("nvml", False, 3, last_error="NVMLError_NoPermission")
    finding = nvml_missing(snap(out, failing, jobs=(gpu_job(5, "cuda"),)), HostFacts(), 0.0)
    assert finding is not None and "fails" in finding.summary
    assert dict(finding.evidence)["nvml collector"] == "failing: NVMLError_NoPermission"
    assert "/dev/nvidia*" in finding.fix


def test_nvml_that_sees_the_gpu_is_no_finding() -> None:
    out, health = nvml_tick(FakeNvml([h100(0)]))
    assert [d.source for d in out.devices] == ["nvml"]
    facts = HostFacts(("/dev/nvidia0",), True, True)
    assert nvml_missing(snap(out, health, jobs=(gpu_job(5),)), facts, 0.0) is None


def test_no_gpu_no_nvml_finding() -> None:
    out, health = nvml_tick(None)
    kinds = [f.kind for f in detect_host(snap(out, health, jobs=(tpu_job(3),)), HostFacts(), 0.0)]
    assert kinds == ["tpu_metrics_unreachable"]  # the TPU job's; nothing about NVML


# --- GPU preallocation -----------------------------------------------------------------------


def preallocated_card(*processes: tuple[int, int | None]) -> CollectorOutput:
    """An H100 that JAX's default preallocation filled to 75 % (61,440 of 81,559 MiB)."""
    out, _ = nvml_tick(FakeNvml([h100(0, used=61_440 * MIB, processes=list(processes))]))
    return out


def test_a_full_card_with_little_in_use_explains_preallocation() -> None:
    out = preallocated_card((4242, 61_000 * MIB))
    (finding,) = gpu_preallocated(snap(out, jobs=(gpu_job(4242),)), 0.0)
    assert finding.kind == "gpu_preallocated" and finding.subject == "gpu 0"
    assert finding.severity == "info"  # alone on its card: nothing is wrong
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in finding.fix
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in finding.fix
    assert finding.value == 61_440 * MIB - 3 * GIB  # NVML used minus the job's peak in use
    evidence = dict(finding.evidence)
    assert evidence["card memory used (NVML)"] == "61,440 MiB of 81,559 MiB (75%)"
    assert evidence["PJRT bytes in use, peak"] == "3,072 MiB"
    assert evidence["allocator pool (PJRT)"] == "61,440 MiB"


def test_another_process_on_a_preallocated_card_is_a_warning() -> None:
    out = preallocated_card((4242, 61_000 * MIB), (777, 500 * MIB))
    (finding,) = gpu_preallocated(snap(out, jobs=(gpu_job(4242),)), 0.0)
    assert finding.severity == "warning"
    assert dict(finding.evidence)["other processes on the card"] == "777"


@pytest.mark.parametrize(
    ("used_mib", "in_use", "peak"),
    [
        (30_000, 2 * GIB, 3 * GIB),  # the card is not full
        (61_440, 40 * GIB, 45 * GIB),  # the job does use it
        (61_440, None, 3 * GIB),  # the job's allocator says nothing
    ],
)
def test_no_preallocation_finding(used_mib: int, in_use: int | None, peak: int) -> None:
    out, _ = nvml_tick(FakeNvml([h100(0, used=used_mib * MIB, processes=[(4242, None)])]))
    assert gpu_preallocated(snap(out, jobs=(gpu_job(4242, in_use=in_use, peak=peak),)), 0.0) == []


def test_a_job_on_another_card_is_not_compared() -> None:
    out = preallocated_card((4242, 61_000 * MIB))
    assert gpu_preallocated(snap(out, jobs=(gpu_job(1111),)), 0.0) == []


# --- the daemon's tracker --------------------------------------------------------------------


def test_tracker_dates_findings_and_refreshes_facts(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    assert nvidia_nodes(tmp_path) == (str(tmp_path / "nvidia0"),)
    now = [0.0]
    loads: list[float] = []

    def library_loads() -> bool:
        loads.append(now[0])
        return False

    tracker = HostFindings(tmp_path, clock=lambda: now[0], library_loads=library_loads,
                           pynvml_installed=lambda: True)  # fmt: skip
    out, health = nvml_tick(None)
    first = tracker.judge(replace(snap(out, health), wall_time=100.0))
    assert [f.kind for f in first] == ["nvml_unavailable"] and first[0].since == 100.0
    now[0] = 30.0
    later = tracker.judge(replace(snap(out, health), wall_time=130.0))
    assert later[0].since == 100.0 and len(loads) == 1  # facts kept for a minute
    now[0] = 61.0
    tracker.judge(replace(snap(out, health), wall_time=161.0))
    assert len(loads) == 2
    cleared = replace(snap(out, health), wall_time=170.0, devices=preallocated_card().devices)
    assert tracker.judge(cleared) == ()
    again = tracker.judge(replace(snap(out, health), wall_time=180.0))
    assert again[0].since == 180.0  # a new episode
