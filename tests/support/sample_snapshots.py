"""Snapshots for the Prometheus exporter's tests in every tier (a training job with many
programs, an eval job, every GPU counter); benchmarks/view_decode.py decodes them too."""

from __future__ import annotations

from xmon.model import (
    AgentHealth,
    Capability,
    CaptureCount,
    CollectorHealth,
    CompileStats,
    DaemonStats,
    Device,
    DeviceInfo,
    DeviceMemory,
    DeviceProcess,
    ExporterHealth,
    Finding,
    FleetIdentity,
    Goodput,
    HardwareCounters,
    HostSample,
    Job,
    JobDevice,
    LedgerStats,
    ProcessSample,
    Program,
    SliceInfo,
    Snapshot,
    StepBreakdown,
    StepStats,
    Utilization,
)

from support.fakes.tpu_snapshot import RUNTIME_SERVICES, TPU_DEVICE

# --- fixtures --------------------------------------------------------------------------------


def full_memory(i: int) -> DeviceMemory:
    return DeviceMemory(
        bytes_in_use=1000 + i, peak_bytes_in_use=2000, bytes_limit=10_000, bytes_reserved=300,
        largest_free_block_bytes=5000, largest_alloc_size=700, num_allocs=42, pool_bytes=9000,
        fragmentation_ratio=0.25,
    )  # fmt: skip


def program(i: int, **kw: object) -> Program:
    values: dict[str, object] = dict(
        fingerprint=f"fp{i:03d}", name=f"jit_f{i}", flops=float(i), transcendentals=2.0,
        bytes_accessed=10.0, argument_bytes=1, output_bytes=2, temp_bytes=3,
        generated_code_bytes=4, peak_memory_bytes=100 + i, compile_seconds=0.5,
        program_ids=(i,), executions=10 * i, executions_per_second=5.0 * i,
        executions_window_seconds=2.0, executions_counted_at=1_700_000_150.0,
        flops_xla=i / 2, bytes_accessed_xla=5.0, loops=i % 3, loops_unknown_trip_count=i % 2,
        flops_lower_bound=bool(i % 2), executions_source="ledger" if i % 4 else "capture",
        device_seconds_per_execution=1e-3 * i,
    )  # fmt: skip
    values.update(kw)
    return Program(**values)  # type: ignore[arg-type]


def train_job(n_programs: int = 60) -> Job:
    """Fully populated: 4 CPU devices, more programs than the default limit."""
    devices = tuple(
        JobDevice(DeviceInfo(i, "cpu", "cpu", local_hardware_id=i, coords=(i, 0)), full_memory(i),
                  busy_ratio=0.2 * i)
        for i in range(4)
    )  # fmt: skip
    return Job(
        job_name="train", pid=1000, hostname="node0", platform="cpu", jax_version="0.10.2",
        jaxlib_version="0.10.2", started_at=1_700_000_000.0, last_report_at=1_700_000_100.0,
        devices=devices,
        compile=CompileStats(compiles_total=7, recompiles_total=2,
                             backend_compile_seconds_total=3.5, trace_seconds_total=0.5,
                             lowering_seconds_total=1.0, cache_requests_total=7,
                             cache_hits_total=3, cache_misses_total=4,
                             steady_recompiles_total=1, eager_compiles_total=3),
        programs=tuple(program(i) for i in range(n_programs)),
        steps=StepStats(steps_total=100, step_seconds_total=50.0, last_step_seconds=0.5,
                        p50_step_seconds=0.5, p90_step_seconds=0.6, p99_step_seconds=0.9,
                        steps_per_second=2.0, flops_per_step=1e12, bytes_per_step=1e9,
                        model_flops_per_step=6e11, tokens_per_step=4096.0,
                        seconds_since_last_step=0.3, steps_begun_total=101,
                        open_step_seconds=0.25, stall_waits_in="host"),
        utilization=Utilization(
            achieved_flops_per_second=2e12, achieved_bytes_per_second=2e9,
            achieved_model_flops_per_second=1.2e12, peak_flops_per_second=4e12,
            peak_bytes_per_second=4e9, model_flops_utilization_ratio=0.3,
            hardware_flops_utilization_ratio=0.5, memory_bandwidth_utilization_ratio=0.5,
            flops_lower_bound=True, tokens_per_second=8192.0),
        process=ProcessSample(1.5, 120.0, 2**30, num_threads=12),
        agent=AgentHealth(50, 1, 2, 3, 0.01, ledger_samples_total=40,
                          ledger_samples_skipped_total=2, ledger_next_sample_at=1_700_000_210.0),
        ledger=LedgerStats(samples=8, sampled_seconds=0.8, window_seconds=70.0,
                           last_sample_at=1_700_000_190.0, parse_errors_total=1,
                           sample_seconds_asked=4.0, sample_seconds_most=0.05),
        captures=(CaptureCount("trace", "step_time", 2, 1, 1_700_000_150.0, "slow step",
                               ("/tb/train-1000/plugins/profile/s/node0.xplane.pb",)),),
        findings=(Finding("recompile", "warning", "jit_a recompiled", 1.0, subject="jit_a"),
                  Finding("recompile", "warning", "jit_b recompiled", 1.0, subject="jit_b"),
                  Finding("no_peak", "info", "no peak", 1.0)),
        fleet=FleetIdentity("10.0.0.2:8476/4", process_index=2, process_count=4, slice_index=0,
                            worker="w-2", distributed=True),
        step_breakdown=StepBreakdown(0.5, 0.3, 0.15, 0.05),
        goodput=Goodput(3600.0, (("productive", 3000.0), ("host_wait", 300.0),
                                 ("startup", 120.0), ("compile", 180.0)),
                        ratio=3000 / 3600, ratio_5m=0.9, ratio_1h=None, biggest_badput="host_wait",
                        restart_seconds=95.0),
        capabilities=(Capability("ledger"), Capability("loop_cost", "no HLO text parser")),
    )  # fmt: skip


def eval_job() -> Job:
    """Sparse: CPU memory_stats() is None, no steps yet, no process sample."""
    info = DeviceInfo(0, "cpu", "cpu")
    return Job(
        job_name="eval", pid=2000, hostname="node0", platform="cpu", jax_version="0.10.2",
        jaxlib_version="0.10.2",
        devices=(JobDevice(info, DeviceMemory(live_array_bytes=64,
                                              live_array_read_at=1_700_000_190.0)),),
    )  # fmt: skip


# every NVML-only field of HardwareCounters, so each GPU family is emitted once
GPU_COUNTERS: dict[str, float] = dict(
    memory_reserved_bytes=512 * 2**20, memory_busy_ratio=0.4, sm_active_ratio=0.7,
    sm_occupancy_ratio=0.3, tensor_active_ratio=0.5, dram_active_ratio=0.6,
    power_limit_watts=700.0, energy_joules_total=1e6, sm_clock_hertz=1.98e9,
    memory_clock_hertz=2.619e9, pcie_tx_bytes_per_second=1e9, pcie_rx_bytes_per_second=2e9,
    nvlink_tx_bytes_per_second=3e11, nvlink_rx_bytes_per_second=3e11,
    ecc_corrected_errors_total=1, ecc_uncorrected_errors_total=0,
    ecc_corrected_errors_aggregate_total=5, ecc_uncorrected_errors_aggregate_total=0,
    xid_errors_total=1, last_xid=79,
)  # fmt: skip


def snapshot(jobs: tuple[Job, ...] | None = None, seq: int = 1) -> Snapshot:
    return Snapshot(
        seq=seq, wall_time=1_700_000_200.0, monotonic=10.0, hostname="node0",
        daemon=DaemonStats("0.1.0", 1_700_000_000.0, agents_connected=2,
                           reports_received_total=500, reports_rejected_total=1,
                           agents_disconnected_total=1, goodput_floor=0.5),
        host=HostSample("node0", 16, 0.25, 64 * 2**30, 16 * 2**30, 48 * 2**30, 1.5),
        devices=(
            Device(0, "gpu", "NVIDIA H100 80GB HBM3", "nvml",
                   HardwareCounters(10 * 2**30, 80 * 2**30, 0.9, 0.8, 350.0, 60.0,
                                    **GPU_COUNTERS),
                   uuid="GPU-abc", pci_bus_id="0000:01:00.0",
                   processes=(DeviceProcess(1000, 9 * 2**30), DeviceProcess(3000))),
            Device(1, "gpu", "NVIDIA H100 80GB HBM3", "nvml", HardwareCounters()),
            TPU_DEVICE,
        ),
        jobs=(train_job(), eval_job()) if jobs is None else jobs,
        collectors=(CollectorHealth("host", True, 0, 0.002),
                    CollectorHealth("libtpu", False, 0, None, present=False)),
        runtime_services=RUNTIME_SERVICES,
        slice_info=SliceInfo("train-v5e-16", 0, 1, 2, 4, "v5litepod-16", "env"),
        exporters=(ExporterHealth("tensorboard", False, 3, "OSError: disk full", "/tb"),),
        findings=(Finding("gpu_preallocated", "info", "gpu 0 looks 75% full", 1.0,
                          subject="gpu 0"),),
    )  # fmt: skip
