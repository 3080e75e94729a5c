"""Shared by the ``xmon top`` / ``xmon monitor`` tests: snapshot builders and the real demo job
(the daemon itself comes from procs.start_daemon)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from xmon.model import (
    CompileEvent,
    CompileStats,
    DaemonStats,
    Device,
    DeviceInfo,
    DeviceMemory,
    HardwareCounters,
    HostSample,
    Job,
    JobDevice,
    ProcessSample,
    Program,
    Snapshot,
    StepStats,
    Utilization,
)

from support.procs import Proc, base_env, spawn

GiB = 2**30


def _executions(i: int, started_at: float) -> dict[str, Any]:
    """Every other program was counted in a trace; the rest ran before any was taken."""
    if i % 2:
        return {}
    return dict(executions=10 * (i + 1), executions_per_second=5.0 * (i + 1),
                executions_window_seconds=2.0, executions_counted_at=started_at + 100)  # fmt: skip


def job(
    name: str = "train",
    pid: int = 1000,
    devices: int = 4,
    steps: int = 100,
    step_seconds: float = 0.5,
    mfu: float | None = 0.4,
    in_use: int = GiB,
    limit: int | None = 16 * GiB,
    programs: int = 3,
    started_at: float = 1_700_000_000.0,
    platform: str = "tpu",
    compiles: int = 5,
    hfu: float | None = None,
    busy: float | None = None,
    inferred: bool = False,
    lower_bound: bool = False,
) -> Job:
    memory = DeviceMemory(bytes_in_use=in_use, peak_bytes_in_use=in_use * 2, bytes_limit=limit)
    kind = "TPU v6 lite" if platform == "tpu" else "cpu"
    return Job(
        job_name=name, pid=pid, hostname="node0", platform=platform, jax_version="0.10.2",
        jaxlib_version="0.10.2", started_at=started_at, last_report_at=started_at + 100,
        devices=tuple(
            JobDevice(DeviceInfo(i, platform, kind, local_hardware_id=i), memory, busy)
            for i in range(devices)
        ),
        compile=CompileStats(
            compiles_total=compiles, recompiles_total=1, backend_compile_seconds_total=2.5,
            cache_requests_total=compiles, cache_hits_total=1, cache_misses_total=compiles - 1,
            recent=tuple(CompileEvent(f"jit({name}_f{i})", 0.1 * (i + 1), started_at + i)
                         for i in range(compiles)),
        ),
        programs=tuple(
            Program(f"{name}-fp{i}", f"jit_{name}_{i}", flops=1e9 * (i + 1), bytes_accessed=1e6,
                    argument_bytes=1000, output_bytes=2000, temp_bytes=3000 * (i + 1),
                    peak_memory_bytes=10_000 * (i + 1), compile_seconds=0.1, num_devices=devices,
                    compiled_at=started_at + i, program_ids=(i,), **_executions(i, started_at))
            for i in range(programs)
        ),
        steps=StepStats(
            steps_total=steps, step_seconds_total=steps * step_seconds,
            last_step_seconds=step_seconds, p50_step_seconds=step_seconds,
            steps_per_second=1 / step_seconds, flops_per_step=1e12, inferred=inferred,
            inferred_from=f"jit_{name}_0" if inferred else None,
        ),
        utilization=Utilization(model_flops_utilization_ratio=mfu,
                                hardware_flops_utilization_ratio=hfu,
                                flops_lower_bound=lower_bound),
        process=ProcessSample(1.2, 50.0, 2 * GiB, 10),
    )  # fmt: skip


def tpu_device(index: int, pids: tuple[int, ...] = (), util: float | None = 0.5) -> Device:
    counters = HardwareCounters(
        memory_used_bytes=4 * GiB, memory_total_bytes=32 * GiB, utilization_ratio=util,
        power_watts=150.0, temperature_celsius=55.0,
    )  # fmt: skip
    return Device(index, "tpu", "TPU v6 lite", "libtpu", counters, pids=pids)


def snapshot(
    seq: int = 1,
    jobs: tuple[Job, ...] = (),
    devices: tuple[Device, ...] = (),
    period: float = 1.0,
    host: HostSample | None = None,
) -> Snapshot:
    """Snapshot number ``seq`` of a daemon ticking every ``period`` seconds."""
    return Snapshot(
        seq=seq, wall_time=1_700_000_200.0 + seq * period, monotonic=1000.0 + seq * period,
        hostname="node0", daemon=DaemonStats("0.1.0", 1_700_000_000.0, len(jobs)),
        host=host or HostSample("node0", 8, 0.25, 64 * GiB, 16 * GiB, 48 * GiB, 1.5,
                                (0.2, 0.3, 0.2, 0.3, 0.2, 0.3, 0.2, 0.3)),
        devices=devices, jobs=jobs,
    )  # fmt: skip


def start_demo(workdir: Path, socket_path: Path, devices: int = 4, name: str = "demo") -> Proc:
    """The real demo training job (``python -m xmon.demo``: JAX on ``devices`` CPU devices)."""
    env = base_env(
        XMON_SOCKET=str(socket_path),
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
    )
    cmd = [sys.executable, "-m", "xmon.demo", "--steps", "0", "--job-name", name,
           "--width", "128", "--report-every", "0"]  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    return spawn(cmd, workdir / f"demo-{name}.log", env)
