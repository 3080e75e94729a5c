"""Job view: step time, MFU, bandwidth utilisation, compiles, programs, memory per device."""

from __future__ import annotations

from dashboards.grafana import Board, Panel, Row, Variable, q

J = 'instance=~"$instance", job_name=~"$job_name"'
JD = J + ', device=~"$device"'
JOB = "{{job_name}} ({{pid}})"
DEVICE = "{{job_name}} ({{pid}}) dev {{device}}"
RATE = "[$__rate_interval]"


def _overview() -> Row:
    def stat(title: str, description: str, expr: str, unit: str = "none") -> Panel:
        return Panel(title, description, (q(expr),), "stat", unit, width=3, height=4)

    return Row("Overview", (
        stat("MFU", "Achieved FLOP/s over the devices' peak FLOP/s (xmon's peak table).",
             f"xmon_job_model_flops_utilization_ratio{{{J}}}", "percentunit"),
        stat("Bandwidth utilisation", "Achieved bytes/s over the devices' peak memory "
             "bandwidth.", f"xmon_job_memory_bandwidth_utilization_ratio{{{J}}}",
             "percentunit"),
        stat("Step time p50", "Median step time over the agent's recent window.",
             f'xmon_job_step_duration_seconds{{{J}, quantile="0.5"}}', "s"),
        stat("Steps per second", "Recent step rate.", f"xmon_job_steps_per_second{{{J}}}"),
        stat("Devices", "PJRT devices of the selected processes.",
             f"count(xmon_job_device_info{{{J}}})"),
        stat("Programs", "Compiled XLA programs reported.", f"sum(xmon_job_programs{{{J}}})"),
        stat("Compiles", "XLA compiles since the processes started.",
             f"sum(xmon_job_compiles_total{{{J}}})"),
        stat("Processes", "Processes of the job (multi-process jobs: one per host or chip).",
             f"count(xmon_job_info{{{J}}})"),
        Panel("Processes", "One row per process: process_index of process_count, host, "
              "platform and versions.", (q(f"xmon_job_info{{{J}}}"),), "table", width=24,
              height=6),
    ))  # fmt: skip


def _steps() -> Row:
    return Row("Step time", (
        Panel("Step time quantiles", "p50/p90/p99 over the agent's recent window.",
              (q(f'xmon_job_step_duration_seconds{{{J}, quantile=~"0.5|0.9|0.99"}}',
                 "{{job_name}} ({{pid}}) p{{quantile}}"),), unit="s"),
        Panel("Mean step time", "Step seconds over steps in the interval.",
              (q(f"rate(xmon_job_step_duration_seconds_sum{{{J}}}{RATE})"
                 f" / rate(xmon_job_step_duration_seconds_count{{{J}}}{RATE})", JOB),),
              unit="s", width=8),
        Panel("Last step", "Duration of the last completed step.",
              (q(f"xmon_job_last_step_duration_seconds{{{J}}}", JOB),), unit="s", width=8),
        Panel("Steps per second", "Steps counted in the interval.",
              (q(f"rate(xmon_job_steps_total{{{J}}}{RATE})", JOB),), width=8),
    ))  # fmt: skip


def _utilisation() -> Row:
    return Row("Utilisation", (
        Panel("MFU", "Model FLOPs utilisation.",
              (q(f"xmon_job_model_flops_utilization_ratio{{{J}}}", JOB),),
              unit="percentunit"),
        Panel("Memory bandwidth utilisation", "Bytes accessed per second over peak HBM "
              "bandwidth.", (q(f"xmon_job_memory_bandwidth_utilization_ratio{{{J}}}", JOB),),
              unit="percentunit"),
        Panel("FLOP/s: achieved and peak", "FLOPs per step times steps per second, and the "
              "devices' peak.",
              (q(f"xmon_job_achieved_flops_per_second{{{J}}}", "achieved " + JOB),
               q(f"xmon_job_peak_flops_per_second{{{J}}}", "peak " + JOB)), unit="flops"),
        Panel("Bytes/s: achieved and peak", "Bytes accessed per step times steps per second, "
              "and the devices' peak.",
              (q(f"xmon_job_achieved_bytes_per_second{{{J}}}", "achieved " + JOB),
               q(f"xmon_job_peak_memory_bandwidth_bytes_per_second{{{J}}}", "peak " + JOB)),
              unit="Bps"),
        Panel("FLOPs per step", "All devices of the job together.",
              (q(f"xmon_job_flops_per_step{{{J}}}", JOB),)),
        Panel("Bytes per step", "Bytes accessed by one step, all devices together.",
              (q(f"xmon_job_bytes_per_step{{{J}}}", JOB),), unit="bytes"),
    ))  # fmt: skip


def _compiles() -> Row:
    return Row("Compiles", (
        Panel("Compiles per minute", "Compiles, and recompiles of functions compiled before "
              "(new shapes, dtypes or static arguments).",
              (q(f"60 * rate(xmon_job_compiles_total{{{J}}}{RATE})", "compiles " + JOB),
               q(f"60 * rate(xmon_job_recompiles_total{{{J}}}{RATE})", "recompiles " + JOB)),
              width=8),
        Panel("Compile time share", "Seconds spent compiling per second, by phase.",
              (q(f"rate(xmon_job_compile_seconds_total{{{J}}}{RATE})",
                 "{{phase}} " + JOB),), unit="percentunit", width=8),
        Panel("Compilation cache", "Persistent compilation cache hits over requests.",
              (q(f"xmon_job_compilation_cache_hits_total{{{J}}}"
                 f" / xmon_job_compilation_cache_requests_total{{{J}}}", JOB),),
              unit="percentunit", width=8),
    ))  # fmt: skip


def _programs() -> Row:
    return Row("Programs", (
        Panel("Programs", "Compiled programs with cost and memory analysis (the per-job "
              'series limit folds the rest into program="_other").',
              (q(f"xmon_job_program_flops{{{J}}}"), q(f"xmon_job_program_bytes_accessed{{{J}}}"),
               q(f"xmon_job_program_peak_memory_bytes{{{J}}}"),
               q(f"xmon_job_program_temp_bytes{{{J}}}"),
               q(f"xmon_job_program_compile_seconds{{{J}}}")),
              "table", width=24, height=9),
        Panel("Programs reported", "Compiled programs per process.",
              (q(f"xmon_job_programs{{{J}}}", JOB),), width=12),
        Panel("Top programs by FLOPs", "FLOPs of one execution per device.",
              (q(f"topk(5, xmon_job_program_flops{{{J}}})", "{{program}} " + JOB),),
              width=12),
    ))  # fmt: skip


def _memory() -> Row:
    return Row("Memory per device", (
        Panel("PJRT memory in use", "Allocator bytes in use per device (CPU: live arrays).",
              (q(f"xmon_job_device_memory_in_use_bytes{{{JD}}}", DEVICE),), unit="bytes",
              width=8),
        Panel("Peak memory", "Peak allocator bytes in use since the process started.",
              (q(f"xmon_job_device_memory_peak_bytes{{{JD}}}", DEVICE),), unit="bytes",
              width=8),
        Panel("Memory in use over limit", "How close each device is to the allocator limit.",
              (q(f"xmon_job_device_memory_in_use_bytes{{{JD}}}"
                 f" / xmon_job_device_memory_limit_bytes{{{JD}}}", DEVICE),),
              unit="percentunit", width=8, max=1),
        Panel("Fragmentation", "Fragmentation of the allocator's free memory.",
              (q(f"xmon_job_device_memory_fragmentation_ratio{{{JD}}}", DEVICE),),
              unit="percentunit", width=8),
        Panel("Largest free block", "Largest free block of the allocator.",
              (q(f"xmon_job_device_memory_largest_free_block_bytes{{{JD}}}", DEVICE),),
              unit="bytes", width=8),
        Panel("Allocations per second", "Allocator allocations.",
              (q(f"rate(xmon_job_device_allocations_total{{{JD}}}{RATE})", DEVICE),), width=8),
    ))  # fmt: skip


def _process() -> Row:
    return Row("Process", (
        Panel("CPU", "CPU use of the process in cores.",
              (q(f"xmon_job_process_cpu_utilization_ratio{{{J}}}", JOB),), width=6),
        Panel("Resident memory", "Host memory of the process.",
              (q(f"xmon_job_process_resident_memory_bytes{{{J}}}", JOB),), unit="bytes",
              width=6),
        Panel("Threads", "Threads of the process.",
              (q(f"xmon_job_process_threads{{{J}}}", JOB),), width=6),
        Panel("Agent overhead", "Share of wall time spent in the xmon agent's own thread.",
              (q(f"rate(xmon_agent_overhead_seconds_total{{{J}}}{RATE})", JOB),),
              unit="percentunit", width=6),
    ))  # fmt: skip


BOARD = Board(
    uid="xmon-job",
    title="xmon / Job",
    description="One JAX job: step time, MFU and bandwidth utilisation, compiles, programs "
    "and PJRT memory per device.",
    variables=(
        Variable("instance", "Host", "label_values(xmon_job_info, instance)"),
        Variable("job_name", "Job", 'label_values(xmon_job_info{instance=~"$instance"}, job_name)'),
        Variable(
            "device",
            "Device",
            'label_values(xmon_job_device_info{instance=~"$instance", '
            'job_name=~"$job_name"}, device)',
        ),
    ),  # fmt: skip
    rows=(_overview(), _steps(), _utilisation(), _compiles(), _programs(), _memory(), _process()),
)
