"""Snapshots on a settable clock for the TensorBoard exporter, and its event files read back
with tensorboard's own reader."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xmon.model import (
    CaptureCount,
    CompileStats,
    DaemonStats,
    Device,
    DeviceInfo,
    DeviceMemory,
    Job,
    JobDevice,
    Program,
    Snapshot,
    StepStats,
    Utilization,
)

STARTED = 1_700_000_000.0


def job(pid: int = 42, name: str = "train", in_use: int = 1000, steps: int = 10) -> Job:
    devices = (
        JobDevice(DeviceInfo(0, "gpu", "H100"), DeviceMemory(bytes_in_use=in_use, bytes_limit=4000,
                                                             peak_bytes_in_use=in_use + 1),
                  busy_ratio=0.25),
        JobDevice(DeviceInfo(1, "cpu", "cpu"), DeviceMemory(live_array_bytes=in_use // 2)),
    )  # fmt: skip
    return Job(
        job_name=name, pid=pid, hostname="h", platform="gpu", jax_version="x", jaxlib_version="x",
        started_at=STARTED, devices=devices,
        compile=CompileStats(compiles_total=3, recompiles_total=1),
        programs=(Program("1", "jit_f"),),
        steps=StepStats(steps_total=steps, last_step_seconds=0.5, p50_step_seconds=0.25,
                        steps_per_second=4.0),
        utilization=Utilization(model_flops_utilization_ratio=0.4,
                                hardware_flops_utilization_ratio=0.55,
                                memory_bandwidth_utilization_ratio=None),
        captures=(CaptureCount("trace", "manual", 2),),
    )  # fmt: skip


def snapshot(wall: float, jobs: tuple[Job, ...], devices: tuple[Device, ...] = ()) -> Snapshot:
    return Snapshot(seq=1, wall_time=wall, monotonic=wall, hostname="h",
                    daemon=DaemonStats("0", 0.0), jobs=jobs, devices=devices)  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def read(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run))
    acc.Reload()
    return acc
