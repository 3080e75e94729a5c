"""Job view: step time, HFU and MFU, device busy, bandwidth utilisation, compiles, programs,
memory per device, and the execution ledger the busy ratios and execution rates come from."""

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
        stat("HFU", HFU_TEXT, f"xmon_job_hardware_flops_utilization_ratio{{{J}}}",
             "percentunit"),
        stat("MFU", MFU_TEXT, f"xmon_job_model_flops_utilization_ratio{{{J}}}", "percentunit"),
        stat("Device busy", BUSY_TEXT + " Mean over the job's devices.",
             f"avg by (instance, job_name, pid) (xmon_job_device_busy_ratio{{{J}}})",
             "percentunit"),
        stat("Bandwidth utilisation", "Achieved bytes/s over the devices' peak memory "
             "bandwidth.", f"xmon_job_memory_bandwidth_utilization_ratio{{{J}}}",
             "percentunit"),
        stat("Step time p50", "Median step time over the agent's recent window.",
             f'xmon_job_step_duration_seconds{{{J}, quantile="0.5"}}', "s"),
        stat("Steps per second", "Recent step rate (inferred where Steps inferred is 1).",
             f"xmon_job_steps_per_second{{{J}}}"),
        stat("Steps inferred", "1: the job marks no steps, so steps are the executions of its "
             "dominant repeated program (named in the program label); 0: marked steps.",
             f"xmon_job_steps_inferred{{{J}}}"),
        stat("FLOPs lower bound", "1: a step program has a loop of unknown trip count, so "
             "hardware FLOPs and HFU are at least the values shown.",
             f"xmon_job_flops_lower_bound{{{J}}}"),
        stat("FLOPs upper bound", "1: a step program has a conditional whose branches do "
             "different work; XLA counts the costliest, so hardware FLOPs and HFU are at most "
             "the values shown.", f"xmon_job_flops_upper_bound{{{J}}}"),
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
        Panel("HFU", HFU_TEXT,
              (q(f"xmon_job_hardware_flops_utilization_ratio{{{J}}}", JOB),),
              unit="percentunit"),
        Panel("MFU", MFU_TEXT,
              (q(f"xmon_job_model_flops_utilization_ratio{{{J}}}", JOB),),
              unit="percentunit"),
        Panel("Device busy", BUSY_TEXT,
              (q(f"xmon_job_device_busy_ratio{{{JD}}}", DEVICE),), unit="percentunit", max=1),
        Panel("Memory bandwidth utilisation", "Bytes accessed per second over peak HBM "
              "bandwidth.", (q(f"xmon_job_memory_bandwidth_utilization_ratio{{{J}}}", JOB),),
              unit="percentunit"),
        Panel("FLOP/s: hardware, model and peak", "Hardware FLOP/s (what XLA counts as "
              "executed), model FLOP/s (declared model FLOPs per step times steps per second), "
              "and the devices' peak.",
              (q(f"xmon_job_achieved_flops_per_second{{{J}}}", "hardware " + JOB),
               q(f"xmon_job_achieved_model_flops_per_second{{{J}}}", "model " + JOB),
               q(f"xmon_job_peak_flops_per_second{{{J}}}", "peak " + JOB)), unit="flops"),
        Panel("Tokens per second", "Declared tokens per step times steps per second.",
              (q(f"xmon_job_tokens_per_second{{{J}}}", JOB),)),
        Panel("Bytes/s: achieved and peak", "Bytes accessed per step times steps per second, "
              "and the devices' peak.",
              (q(f"xmon_job_achieved_bytes_per_second{{{J}}}", "achieved " + JOB),
               q(f"xmon_job_peak_memory_bandwidth_bytes_per_second{{{J}}}", "peak " + JOB)),
              unit="Bps"),
        Panel("FLOPs per step: hardware and model", "Hardware: each program's loop-aware "
              "FLOPs times its executions per step; model: as declared. All devices together.",
              (q(f"xmon_job_flops_per_step{{{J}}}", "hardware " + JOB),
               q(f"xmon_job_model_flops_per_step{{{J}}}", "model " + JOB))),
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
              (q(f"xmon_job_program_flops{{{J}}}"), q(f"xmon_job_program_flops_xla{{{J}}}"),
               q(f"xmon_job_program_flops_lower_bound{{{J}}}"),
               q(f"xmon_job_program_flops_upper_bound{{{J}}}"),
               q(f"xmon_job_program_loops{{{J}}}"),
               q(f"xmon_job_program_bytes_accessed{{{J}}}"),
               q(f"xmon_job_program_executions_per_second{{{J}}}"),
               q(f"xmon_job_program_device_seconds_per_execution{{{J}}}"),
               q(f"xmon_job_program_peak_memory_bytes{{{J}}}"),
               q(f"xmon_job_program_temp_bytes{{{J}}}"),
               q(f"xmon_job_program_compile_seconds{{{J}}}")),
              "table", width=24, height=9),
        Panel("Programs reported", "Compiled programs per process.",
              (q(f"xmon_job_programs{{{J}}}", JOB),), width=8),
        Panel("Top programs by FLOPs", "Loop-aware FLOPs of one execution per device.",
              (q(f"topk(5, xmon_job_program_flops{{{J}}})", "{{program}} " + JOB),),
              width=8),
        Panel("Top programs by device time", "Device seconds per second each program takes "
              "on one device: executions per second times device time per execution.",
              (q(f"topk(5, xmon_job_program_executions_per_second{{{J}}}"
                 f" * xmon_job_program_device_seconds_per_execution{{{J}}})",
                 "{{program}} " + JOB),), unit="percentunit", width=8),
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


def _goodput() -> Row:
    return Row("Goodput", (
        Panel("Goodput", "Productive share of the process's wall time: stepping with the "
              "devices busy (docs/goodput.md), over its life, the last 5 minutes and hour.",
              (q(f'xmon_job_goodput_ratio{{{J}, window=~"life|5m|1h"}}', JOB + " {{window}}"),
               q('xmon_daemon_goodput_floor_ratio{instance=~"$instance"}', "floor")),
              unit="percentunit", max=1, width=8),
        Panel("Where the wall time went", "Seconds of the process's life per bucket, stacked: "
              "productive, host_wait (devices waiting for the host inside steps), startup, "
              "compile, checkpoint_save/restore, stall, idle, unattributed; they sum to the "
              "wall time.",
              (q(f"xmon_job_wall_seconds{{{J}}}", JOB + " {{bucket}}"),),
              unit="s", width=8, stacked=True),
        Panel("Badput over time", "Seconds per second of wall time each badput bucket "
              "took, stacked: the rate of lost time, what to fix first.",
              (q(f'rate(xmon_job_wall_seconds{{{J}, bucket!="productive"}}{RATE})',
                 JOB + " {{bucket}}"),),
              unit="percentunit", width=8, stacked=True),
    ))  # fmt: skip


def _ledger() -> Row:
    return Row("Execution ledger", (
        Panel("Execution samples per minute", "Short profiler samples the agent took, and "
              "those it skipped (profiler busy, or the sample too large).",
              (q(f"60 * rate(xmon_agent_ledger_samples_total{{{J}}}{RATE})", "taken " + JOB),
               q(f"60 * rate(xmon_agent_ledger_samples_skipped_total{{{J}}}{RATE})",
                 "skipped " + JOB)), width=8),
        Panel("Sampled share of the window", "Profiler time the window's samples cover over "
              "the wall time they span: what busy ratios and execution rates stand on.",
              (q(f"xmon_job_ledger_sampled_seconds{{{J}}}"
                 f" / xmon_job_ledger_window_seconds{{{J}}}", JOB),),
              unit="percentunit", width=8),
        Panel("Time since last sample", "Seconds since the newest execution sample.",
              (q(f"time() - xmon_job_ledger_last_sample_timestamp_seconds{{{J}}}", JOB),),
              unit="s", width=8),
    ))  # fmt: skip


HFU_TEXT = (
    "Hardware FLOPs utilisation: the FLOPs XLA counts as executed (every loop body per trip; "
    "rematerialisation and optimizer included) per second over the devices' peak. A lower "
    "bound where FLOPs lower bound is 1."
)
MFU_TEXT = (
    "Model FLOPs utilisation (PaLM's definition): the model FLOPs the job declares "
    "(xmon.declare_model_flops, e.g. 6 x parameters x tokens) per second over the devices' "
    "peak. No data for jobs that declare none: see HFU."
)
BUSY_TEXT = (
    "Share of the sampled time each device ran the job's programs (execution ledger). Low "
    "while the job steps: the devices wait on the host (input pipeline, Python)."
)

BOARD = Board(
    uid="xmon-job",
    title="xmon / Job",
    description="One JAX job: step time, HFU and MFU, device busy, bandwidth utilisation, "
    "compiles, programs, PJRT memory per device and the execution ledger.",
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
    rows=(
        _overview(),
        _steps(),
        _utilisation(),
        _compiles(),
        _programs(),
        _memory(),
        _process(),
        _goodput(),
        _ledger(),
    ),
)
