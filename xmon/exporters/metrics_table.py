"""The one table of xmon's Prometheus metric names.

The exporter builds its families from this table (a name missing here is a bug it refuses to
export), ``docs/metrics.md`` is generated from it
(``python -m xmon.exporters.metrics_table > docs/metrics.md``), and dashboards and alert rules
can be linted against it. Names are a contract: rename only with a changelog entry. Names are
the exposed names, so counters end in ``_total`` and info metrics in ``_info``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "summary", "histogram", "info"]

JOB = ("job_name", "pid")
JOB_DEVICE = (*JOB, "device", "device_kind", "platform")
PROGRAM = (*JOB, "program", "fingerprint")
DEVICE = ("device", "device_kind", "platform")
COLLECTOR = ("collector",)
RUNTIME = ("source", "address")  # an accelerator runtime's metrics service (libtpu's)
RUNTIME_POINT = (*RUNTIME, "metric", "device", "attributes")

# The daemon's bounds against a flood or a buggy client: the bound label of
# xmon_daemon_refused_total (docs/reliability.md says what each protects).
REFUSAL_BOUNDS = (
    "devices",  # devices (or their memory samples) past max_devices_per_job
    "programs",  # programs past max_programs_per_job
    "memory_stats",  # memory stats past 64 per device sample, or keys over 128 characters
    "job_bytes",  # new devices or programs that would pass max_job_bytes
    "state_bytes",  # ... that would pass max_state_bytes over all jobs
    "connections",  # streams past max_connections
    "inflight_bytes",  # streams past the calls max_inflight_bytes allows at once
    "pending_hellos",  # streams waiting for a hello past max_pending_hellos: the oldest closed
    "report_strings",  # strings of a kept report (recompiled functions, stall) cut to length
    "hello_timeout",  # streams that sent no hello within hello_timeout_seconds
    "pid_claims",  # hellos claiming a pid whose process holds no connection (verify_pids)
    "subscribers",  # views past max_subscribers, or cut off after subscriber_stall_seconds
    "snapshot_programs",  # programs left out of a view's snapshot so that it fits a message
    "ledger_bytes",  # execution samples dropped while 32 MiB of samples waited or were read
    "ledger_waiting",  # execution samples dropped while 32 waited to be read (half a core)
    "sample_numbers",  # execution samples with numbers no profiler session gives
    "xspace_bytes",  # execution samples or capture traces over their bytes bound
    "xspace_planes",  # ... with more planes than their bound
    "xspace_events",  # ... with more events than their bound
    "xspace_ids",  # ... with more distinct programs, devices, run ids or metadata
    "metrics_connections",  # /metrics connections closed past metrics_max_connections
    "metrics_timeouts",  # /metrics connections closed for sending no request in time
    "tensorboard_bytes",  # TensorBoard event files rotated away at a job's bytes budget
    "message_parts",  # messages in parts dropped: past max_message_bytes, 64 MiB joining, disorder
)
LABEL_VALUE_MAX = 128  # label values from clients (job names, program names) are cut to this
OTHER_PROGRAM = "_other"  # program label of the series that folds programs past the limit


@dataclass(frozen=True)
class MetricSpec:
    name: str  # exposed name, including _total / _info
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""  # base unit, "" when dimensionless or a count
    source: str = ""  # the snapshot field it is read from (xmon.model)


def _g(name: str, help: str, labels: tuple[str, ...], unit: str, source: str) -> MetricSpec:
    return MetricSpec(name, "gauge", help, labels, unit, source)


def _c(name: str, help: str, labels: tuple[str, ...], unit: str, source: str) -> MetricSpec:
    return MetricSpec(name, "counter", help, labels, unit, source)


def _i(name: str, help: str, labels: tuple[str, ...], source: str) -> MetricSpec:
    return MetricSpec(name, "info", help, labels, "", source)


# fmt: off
# (the table reads best one spec per few lines; the formatter would explode it five-fold)
_MEM = "Job.devices[].memory."
_PROG = "Job.programs[]."
_FOLD = f' Programs past the per-job limit are summed into program="{OTHER_PROGRAM}".'

_JOB_METRICS = (
    _i("xmon_job_info", "A JAX process with the xmon agent attached (always 1); its static facts.",
       (*JOB, "hostname", "platform", "jax_version", "jaxlib_version", "process_index",
        "process_count"), "Job"),
    _g("xmon_job_start_time_seconds", "Unix time the agent attached to the job.",
       JOB, "seconds", "Job.started_at"),
    _g("xmon_job_pid_verified", "1 if the daemon verified that process pid made a connection to "
       "its socket (the connection's peer credentials, SO_PEERCRED) and showed this stream's "
       "token as one of its thread names, which only that process can set; 0 where it did not "
       "or could not check (verify_pids off, a client in a pid namespace the daemon cannot see, "
       "an agent that offers no proof).",
       JOB, "", "Job.pid_verified"),
    _i("xmon_job_device_info", "A PJRT device as the job sees it (always 1); jax.Device facts. "
       "device is jax.Device.id; local_hardware_id usually equals xmon_device_info's device.",
       (*JOB_DEVICE, "process_index", "coords", "local_hardware_id", "core_on_chip",
        "slice_index"), "Job.devices[].info"),
    _g("xmon_job_device_memory_in_use_bytes", "PJRT allocator bytes in use "
       "(Device.memory_stats()['bytes_in_use']); on CPU the sum of live jax.Array bytes.",
       JOB_DEVICE, "bytes", _MEM + "in_use_bytes"),
    _g("xmon_job_device_memory_peak_bytes", "Peak PJRT allocator bytes in use since the job "
       "started (Device.memory_stats()['peak_bytes_in_use']).",
       JOB_DEVICE, "bytes", _MEM + "peak_bytes_in_use"),
    _g("xmon_job_device_memory_limit_bytes", "Bytes the PJRT allocator may use on the device "
       "(Device.memory_stats()['bytes_limit']).", JOB_DEVICE, "bytes", _MEM + "bytes_limit"),
    _g("xmon_job_device_memory_reserved_bytes", "Bytes reserved by the PJRT allocator "
       "(Device.memory_stats()['bytes_reserved']).", JOB_DEVICE, "bytes", _MEM + "bytes_reserved"),
    _g("xmon_job_device_memory_largest_free_block_bytes", "Largest free block of the PJRT "
       "allocator (Device.memory_stats()['largest_free_block_bytes']).",
       JOB_DEVICE, "bytes", _MEM + "largest_free_block_bytes"),
    _g("xmon_job_device_memory_largest_alloc_bytes", "Largest single allocation seen "
       "(Device.memory_stats()['largest_alloc_size']).",
       JOB_DEVICE, "bytes", _MEM + "largest_alloc_size"),
    _g("xmon_job_device_memory_pool_bytes", "Bytes held in the PJRT allocator's pool "
       "(Device.memory_stats()['pool_bytes']).", JOB_DEVICE, "bytes", _MEM + "pool_bytes"),
    _c("xmon_job_device_allocations_total", "Allocations made by the PJRT allocator "
       "(Device.memory_stats()['num_allocs'], which only grows).",
       JOB_DEVICE, "", _MEM + "num_allocs"),
    _g("xmon_job_device_memory_fragmentation_ratio", "Fragmentation of the PJRT allocator's free "
       "memory (xmon.analysis.derived.fragmentation_ratio; 0 when it is one contiguous block).",
       JOB_DEVICE, "ratio", _MEM + "fragmentation_ratio"),
    _g("xmon_job_device_memory_read_timestamp_seconds", "Unix time the in-use bytes were read, "
       "where that is not the report's own time: on CPU the live arrays are counted at rest "
       "and paced, so a reading can be older than the scrape (time() minus this is its age).",
       JOB_DEVICE, "seconds", _MEM + "read_at"),
    _g("xmon_job_device_busy_ratio", "Share of the sampled time the device ran the job's "
       "programs (union of its XLA op intervals in the execution ledger's profiler samples); a "
       "host-bound job shows a low value. Absent before the first sample.",
       JOB_DEVICE, "ratio", "Job.devices[].busy_ratio"),
    _c("xmon_job_compiles_total", "XLA backend compiles (jax.monitoring "
       "/jax/core/compile/backend_compile_duration events).",
       JOB, "", "Job.compile.compiles_total"),
    _c("xmon_job_recompiles_total", "Compiles of a function compiled before (new shapes, dtypes "
       "or static arguments).", JOB, "", "Job.compile.recompiles_total"),
    _c("xmon_job_steady_recompiles_total", "Recompiles of a jitted function once the job is past "
       "warm-up (3 marked steps; without markers 30 s after the function's first compile); eager "
       "primitives never count. What the storm alert uses.",
       JOB, "", "Job.compile.steady_recompiles_total"),
    _c("xmon_job_eager_compiles_total", "Compiles of eager primitives (jnp calls outside any "
       "jit), told apart from the job's own jitted functions.",
       JOB, "", "Job.compile.eager_compiles_total"),
    _g("xmon_job_finding", "Findings of this kind and severity the daemon holds for the job "
       "(xmon doctor shows their evidence and fix; docs/doctor.md): kind is recompile, stall, "
       "host_bound, memory_leak, no_steps, no_peak, no_model_flops or cache_never_hits.",
       (*JOB, "kind", "severity"), "", "Job.findings[]"),
    _g("xmon_job_seconds_since_last_step", "Seconds since the job's step count last moved, on "
       "the daemon's clock (counted from when the daemon first saw the job). Absent before the "
       "first step.", JOB, "seconds", "Job.steps.seconds_since_last_step"),
    _c("xmon_job_compile_seconds_total", "Seconds spent compiling, by phase: trace "
       "(jaxpr_trace_duration), lowering (jaxpr_to_mlir_module_duration), backend "
       "(backend_compile_duration).", (*JOB, "phase"), "seconds", "Job.compile.*_seconds_total"),
    _c("xmon_job_compilation_cache_requests_total", "Compiles that consulted the persistent "
       "compilation cache (/jax/compilation_cache/compile_requests_use_cache).",
       JOB, "", "Job.compile.cache_requests_total"),
    _c("xmon_job_compilation_cache_hits_total", "Persistent compilation cache hits "
       "(/jax/compilation_cache/cache_hits).", JOB, "", "Job.compile.cache_hits_total"),
    _c("xmon_job_compilation_cache_misses_total", "Persistent compilation cache misses that "
       "wrote an entry (/jax/compilation_cache/cache_misses).",
       JOB, "", "Job.compile.cache_misses_total"),
    _g("xmon_job_programs", "Compiled XLA programs the job has reported (before the per-job "
       "series limit).", JOB, "", "len(Job.programs)"),
    _g("xmon_job_program_flops", "FLOPs of one execution per device, loop-aware: XLA's cost "
       "analysis with every while-loop body counted once per trip, plus GEMM custom-calls it "
       "omits, and each conditional's branches as often as the execution ledger's samples saw "
       "them run. A lower bound where xmon_job_program_flops_lower_bound is 1, an upper bound "
       "where xmon_job_program_flops_upper_bound is 1." + _FOLD,
       PROGRAM, "", _PROG + "flops"),
    _g("xmon_job_program_flops_xla", "FLOPs of one execution per device as XLA's cost analysis "
       "reports them (each loop body counted once)." + _FOLD, PROGRAM, "", _PROG + "flops_xla"),
    _g("xmon_job_program_flops_lower_bound", "1 if the program has a while loop of unknown trip "
       "count, so its FLOPs and bytes are lower bounds; else 0. For "
       f'program="{OTHER_PROGRAM}" 1 if any folded program is.',
       PROGRAM, "", _PROG + "flops_lower_bound"),
    _g("xmon_job_program_flops_upper_bound", "1 if the program has a conditional (lax.cond, "
       "lax.switch) whose branches do different work: XLA counts the costliest branch, so its "
       "FLOPs are an upper bound for a run that takes a cheaper one, until the execution "
       "ledger's samples show which branches run (then 0); else 0. For "
       f'program="{OTHER_PROGRAM}" 1 if any folded program is.',
       PROGRAM, "", _PROG + "flops_upper_bound"),
    _g("xmon_job_program_loops", "While loops in the program's optimized HLO." + _FOLD,
       PROGRAM, "", _PROG + "loops"),
    _g("xmon_job_program_loops_trip_count_unknown", "While loops whose trip count XLA does not "
       "know (their bodies are counted once)." + _FOLD,
       PROGRAM, "", _PROG + "loops_unknown_trip_count"),
    _g("xmon_job_program_bytes_accessed", "Bytes accessed by one execution per device, "
       "loop-aware like xmon_job_program_flops." + _FOLD,
       PROGRAM, "bytes", _PROG + "bytes_accessed"),
    _g("xmon_job_program_bytes_accessed_xla", "Bytes accessed by one execution per device as "
       "XLA's cost analysis reports them ('bytes accessed', each loop body once)." + _FOLD,
       PROGRAM, "bytes", _PROG + "bytes_accessed_xla"),
    _g("xmon_job_program_transcendentals", "Transcendental operations of one execution per "
       "device (XLA cost analysis)." + _FOLD, PROGRAM, "", _PROG + "transcendentals"),
    _g("xmon_job_program_argument_bytes", "Argument buffer bytes (XLA compiled memory stats)."
       + _FOLD, PROGRAM, "bytes", _PROG + "argument_bytes"),
    _g("xmon_job_program_output_bytes", "Output buffer bytes (XLA compiled memory stats)."
       + _FOLD, PROGRAM, "bytes", _PROG + "output_bytes"),
    _g("xmon_job_program_temp_bytes", "Temporary buffer bytes (XLA compiled memory stats)."
       + _FOLD, PROGRAM, "bytes", _PROG + "temp_bytes"),
    _g("xmon_job_program_generated_code_bytes", "Generated code bytes (XLA compiled memory "
       "stats)." + _FOLD, PROGRAM, "bytes", _PROG + "generated_code_bytes"),
    _g("xmon_job_program_peak_memory_bytes", "Peak device memory of one execution (XLA "
       f'compiled memory stats). For program="{OTHER_PROGRAM}" the largest folded peak.',
       PROGRAM, "bytes", _PROG + "peak_memory_bytes"),
    _g("xmon_job_program_compile_seconds", "Seconds the program took to compile." + _FOLD,
       PROGRAM, "seconds", _PROG + "compile_seconds"),
    _g("xmon_job_program_executions_per_second", "Executions per second, from the execution "
       "ledger's periodic profiler samples or the job's most recent trace capture (see "
       "xmon_job_program_executions_source_info); absent before either saw the program."
       + _FOLD, PROGRAM, "", _PROG + "executions_per_second"),
    _i("xmon_job_program_executions_source_info", "Where the program's executions come from "
       "(always 1): source is ledger (sampled) or capture (a full trace). For "
       f'program="{OTHER_PROGRAM}" the folded programs\' common source, else mixed.',
       (*PROGRAM, "source"), _PROG + "executions_source"),
    _g("xmon_job_program_device_seconds_per_execution", "Mean device time of one execution on "
       "one device, from the same samples as the executions (absent for "
       f'program="{OTHER_PROGRAM}").', PROGRAM, "seconds",
       _PROG + "device_seconds_per_execution"),
)

_STEP_METRICS = (
    _c("xmon_job_steps_total", "Training steps marked by xmon.step() or StepTraceAnnotation; "
       "absent while steps are inferred (xmon_job_steps_inferred: they have a rate, "
       "xmon_job_steps_per_second, and no count).", JOB, "", "Job.steps.steps_total"),
    _g("xmon_job_steps_inferred", "1 if the job marks no steps and its steps are the executions "
       "of its dominant repeated program (named by program), 0 if steps are marked.",
       (*JOB, "program"), "", "Job.steps.inferred, inferred_from"),
    MetricSpec("xmon_job_step_duration_seconds", "summary", "Step duration (interval between "
               "consecutive step starts); quantiles over the agent's recent window.",
               JOB, "seconds", "Job.steps.p50/p90/p99_step_seconds, step_seconds_total"),
    _g("xmon_job_last_step_duration_seconds", "Duration of the last completed step.",
       JOB, "seconds", "Job.steps.last_step_seconds"),
    _g("xmon_job_steps_per_second", "Recent step rate.", JOB, "", "Job.steps.steps_per_second"),
    _g("xmon_job_flops_per_step", "Hardware FLOPs of one step, all devices together: each "
       "program's loop-aware FLOPs times its executions per step.",
       JOB, "", "Job.steps.flops_per_step"),
    _g("xmon_job_flops_lower_bound", "1 if some step program has a loop of unknown trip count, "
       "so FLOPs per step, hardware FLOP/s and HFU are lower bounds; else 0. Absent while FLOPs "
       "per step are unknown.", JOB, "", "Job.utilization.flops_lower_bound"),
    _g("xmon_job_flops_upper_bound", "1 if some step program has a conditional whose branches "
       "do different work and no sample has shown which run, so FLOPs per step, hardware "
       "FLOP/s and HFU count its costliest branch and are upper bounds; else 0. Absent while "
       "FLOPs per step are unknown.",
       JOB, "", "Job.utilization.flops_upper_bound"),
    _g("xmon_job_model_flops_per_step", "Model FLOPs of one step as the user declared them "
       "(xmon.declare_model_flops or xmon.step(flops=...), e.g. 6 x parameters x tokens); "
       "absent without a declaration.",
       JOB, "", "Job.steps.model_flops_per_step"),
    _g("xmon_job_tokens_per_step", "Tokens of one step as the user declared them.",
       JOB, "", "Job.steps.tokens_per_step"),
    _g("xmon_job_bytes_per_step", "Bytes accessed by one step, all devices together.",
       JOB, "bytes", "Job.steps.bytes_per_step"),
    _g("xmon_job_achieved_flops_per_second", "Hardware FLOP/s: FLOPs per step times steps per "
       "second (what XLA counts as executed, rematerialisation and optimizer included).",
       JOB, "", "Job.utilization.achieved_flops_per_second"),
    _g("xmon_job_achieved_model_flops_per_second", "Model FLOP/s: declared model FLOPs per step "
       "times steps per second; absent without a declaration.",
       JOB, "", "Job.utilization.achieved_model_flops_per_second"),
    _g("xmon_job_tokens_per_second", "Declared tokens per step times steps per second.",
       JOB, "", "Job.utilization.tokens_per_second"),
    _g("xmon_job_achieved_bytes_per_second", "Bytes accessed per step times steps per second.",
       JOB, "", "Job.utilization.achieved_bytes_per_second"),
    _g("xmon_job_model_flops_utilization_ratio", "MFU: model FLOP/s over the devices' peak "
       "FLOP/s (PaLM's definition). Absent unless the job declares its model FLOPs, for "
       "device kinds without a known peak, and above 1 (something counted is wrong).",
       JOB, "ratio", "Job.utilization.model_flops_utilization_ratio"),
    _g("xmon_job_hardware_flops_utilization_ratio", "HFU: hardware FLOP/s (XLA's loop-aware "
       "count of what executed) over the devices' peak FLOP/s; absent for device kinds without "
       "a known peak, and above 1 (something counted is wrong).", JOB, "ratio",
       "Job.utilization.hardware_flops_utilization_ratio"),
    _g("xmon_job_memory_bandwidth_utilization_ratio", "Achieved bytes/s over the devices' peak "
       "memory bandwidth; absent above 1.", JOB, "ratio",
       "Job.utilization.memory_bandwidth_utilization_ratio"),
    _g("xmon_job_peak_flops_per_second", "Peak FLOP/s of the job's devices together (xmon's "
       "peak table by device_kind).", JOB, "", "Job.utilization.peak_flops_per_second"),
    _g("xmon_job_peak_memory_bandwidth_bytes_per_second", "Peak memory bandwidth of the job's "
       "devices together (xmon's peak table).", JOB, "", "Job.utilization.peak_bytes_per_second"),
)

_PROCESS_METRICS = (
    _c("xmon_job_process_cpu_seconds_total", "CPU seconds used by the job's process (psutil).",
       JOB, "seconds", "Job.process.cpu_seconds_total"),
    _g("xmon_job_process_resident_memory_bytes", "Resident memory of the job's process (psutil).",
       JOB, "bytes", "Job.process.resident_memory_bytes"),
    _g("xmon_job_process_cpu_utilization_ratio", "CPU use of the job's process in cores "
       "(psutil; above 1 with several busy threads).",
       JOB, "ratio", "Job.process.cpu_utilization_ratio"),
    _g("xmon_job_process_threads", "Threads of the job's process (psutil).",
       JOB, "", "Job.process.num_threads"),
    _c("xmon_agent_reports_sent_total", "Reports the agent sent to the daemon.",
       JOB, "", "Job.agent.reports_sent_total"),
    _c("xmon_agent_reports_dropped_total", "Reports the agent dropped (daemon absent or slow).",
       JOB, "", "Job.agent.reports_dropped_total"),
    _c("xmon_agent_events_dropped_total", "Events the agent dropped from its bounded queue.",
       JOB, "", "Job.agent.events_dropped_total"),
    _c("xmon_agent_reconnects_total", "Times the agent reconnected to the daemon.",
       JOB, "", "Job.agent.reconnects_total"),
    _c("xmon_agent_overhead_seconds_total", "Seconds spent in the agent's own thread.",
       JOB, "seconds", "Job.agent.overhead_seconds_total"),
    _g("xmon_agent_last_report_timestamp_seconds", "Unix time of the job's last report.",
       JOB, "seconds", "Job.last_report_at"),
    _g("xmon_agent_capability_available", "1 where the agent has this capability on the job's "
       "jax and Python, 0 where it does not, with the reason (a private detail this jax lacks, "
       "or an access that failed at run time).", (*JOB, "capability", "reason"), "",
       "Job.capabilities[]"),
)

_LEDGER_METRICS = (
    _c("xmon_agent_ledger_samples_total", "Execution samples (short in-memory profiler "
       "sessions) the agent took and sent.", JOB, "", "Job.agent.ledger_samples_total"),
    _c("xmon_agent_ledger_samples_skipped_total", "Execution samples the agent did not take: "
       "the profiler was busy (a capture or the job's own trace), or the sample was too large.",
       JOB, "", "Job.agent.ledger_samples_skipped_total"),
    _c("xmon_agent_ledger_samples_busy_total", "Of the skipped execution samples, those the "
       "profiler was busy for: the job's own trace (jax.profiler) or a capture.",
       JOB, "", "Job.agent.ledger_samples_busy_total"),
    _c("xmon_job_ledger_parse_errors_total", "Execution samples the daemon could not read.",
       JOB, "", "Job.ledger.parse_errors_total"),
    _g("xmon_job_ledger_samples", "Execution samples in the window the execution rates and "
       "busy ratios come from.", JOB, "", "Job.ledger.samples"),
    _g("xmon_job_ledger_sampled_seconds", "Profiler time those samples cover.",
       JOB, "seconds", "Job.ledger.sampled_seconds"),
    _g("xmon_job_ledger_window_seconds", "Wall time from the first to the last of those samples.",
       JOB, "seconds", "Job.ledger.window_seconds"),
    _g("xmon_job_ledger_last_sample_timestamp_seconds", "Unix time of the newest execution "
       "sample; absent before the first.", JOB, "seconds", "Job.ledger.last_sample_at"),
    _g("xmon_agent_ledger_next_sample_timestamp_seconds", "Unix time the agent's next "
       "execution sample is due: the ledger's first numbers (or the next) come one parse "
       "later. Absent while a sample records.", JOB, "seconds", "Job.agent.ledger_next_sample_at"),
    _g("xmon_job_ledger_sample_seconds_asked", "Length the daemon asked the agent's samples to "
       "have, where a job without markers has steps too long for the configured sample to hold "
       "whole periods of its busiest program, or a program rarer than the steps (an eval every "
       "N steps) runs too seldom for two of its runs in a sample; absent where it asked nothing "
       "(or took its ask back).",
       JOB, "seconds", "Job.ledger.sample_seconds_asked"),
    _g("xmon_job_ledger_sample_seconds_most", "Longest the daemon asked the agent's samples to "
       "record (beyond whole steps), because longer ones held more events or bytes than it "
       "reads (a job of many small ops; each such refusal halves it); absent where it asked no "
       "limit.", JOB, "seconds", "Job.ledger.sample_seconds_most"),
)

_HW = "Snapshot.devices[].hardware."
_GPM = " (NVML GPM, Hopper and later; like DCGM's profiling fields)"
_GPU_METRICS = (  # the nvml collector's; see docs/gpu.md
    _g("xmon_device_memory_reserved_bytes", "Device memory the driver reserves for itself, "
       "outside used and free (NVML memory info v2).", DEVICE, "bytes",
       _HW + "memory_reserved_bytes"),
    _g("xmon_device_memory_busy_ratio", "Fraction of time device memory was being read or "
       "written (NVML utilization.memory).", DEVICE, "ratio", _HW + "memory_busy_ratio"),
    _g("xmon_device_sm_active_ratio", "Fraction of SMs busy, averaged over the period" + _GPM
       + ".", DEVICE, "ratio", _HW + "sm_active_ratio"),
    _g("xmon_device_sm_occupancy_ratio", "Resident warps over the SMs' maximum" + _GPM + ".",
       DEVICE, "ratio", _HW + "sm_occupancy_ratio"),
    _g("xmon_device_tensor_active_ratio", "Fraction of time the SMs ran tensor-core "
       "instructions" + _GPM + ".", DEVICE, "ratio", _HW + "tensor_active_ratio"),
    _g("xmon_device_dram_active_ratio", "Device memory bandwidth used over its peak" + _GPM
       + ".", DEVICE, "ratio", _HW + "dram_active_ratio"),
    _g("xmon_device_power_limit_watts", "Enforced power limit (NVML).",
       DEVICE, "watts", _HW + "power_limit_watts"),
    _c("xmon_device_energy_joules_total", "Energy used since the driver loaded (NVML).",
       DEVICE, "joules", _HW + "energy_joules_total"),
    _g("xmon_device_sm_clock_hertz", "Current SM clock (NVML).",
       DEVICE, "hertz", _HW + "sm_clock_hertz"),
    _g("xmon_device_memory_clock_hertz", "Current memory clock (NVML).",
       DEVICE, "hertz", _HW + "memory_clock_hertz"),
    _g("xmon_device_pcie_tx_bytes_per_second", "PCIe bytes sent by the device per second over "
       "the last period (NVML).", DEVICE, "", _HW + "pcie_tx_bytes_per_second"),
    _g("xmon_device_pcie_rx_bytes_per_second", "PCIe bytes received by the device per second "
       "over the last period (NVML).", DEVICE, "", _HW + "pcie_rx_bytes_per_second"),
    _g("xmon_device_nvlink_tx_bytes_per_second", "NVLink data bytes sent per second over the "
       "last period, all links (NVML).", DEVICE, "", _HW + "nvlink_tx_bytes_per_second"),
    _g("xmon_device_nvlink_rx_bytes_per_second", "NVLink data bytes received per second over "
       "the last period, all links (NVML).", DEVICE, "",
       _HW + "nvlink_rx_bytes_per_second"),
    _c("xmon_device_ecc_errors_total", "ECC errors since the driver loaded (NVML volatile "
       "counters), by error_type: corrected or uncorrected.", (*DEVICE, "error_type"), "",
       _HW + "ecc_*_errors_total"),
    _c("xmon_device_ecc_errors_aggregate_total", "ECC errors over the device's lifetime (NVML "
       "aggregate counters), by error_type: corrected or uncorrected.",
       (*DEVICE, "error_type"), "", _HW + "ecc_*_errors_aggregate_total"),
    _c("xmon_device_xid_errors_total", "XID errors reported by the driver since the daemon "
       "started (NVML events).", DEVICE, "", _HW + "xid_errors_total"),
    _g("xmon_device_last_xid", "Code of the latest XID error since the daemon started.",
       DEVICE, "", _HW + "last_xid"),
    _g("xmon_device_process_memory_used_bytes", "Device memory held by one process (NVML "
       "compute processes); job_name is set when the pid is a job with the agent. With JAX's "
       "default preallocation this is the reserved pool, not live arrays: compare "
       "xmon_job_device_memory_in_use_bytes.", (*DEVICE, "pid", "job_name"), "bytes",
       "Snapshot.devices[].processes[].memory_used_bytes"),
)

_TPU_METRICS = (  # the tpu collector's; see docs/tpu.md
    _g("xmon_device_memory_bandwidth_utilization_ratio", "HBM bandwidth used over the runtime's "
       "sample period, as a fraction of the peak (libtpu tpu.runtime.hbm.utilization.percent "
       "/ 100).", DEVICE, "ratio", _HW + "memory_bandwidth_utilization_ratio"),
    _g("xmon_device_idle_seconds", "Seconds the TensorCore has been idle, 0 while it runs "
       "(libtpu tpu.runtime.tensorcore.idle_duration.seconds).",
       DEVICE, "seconds", _HW + "idle_seconds"),
    _i("xmon_device_location_info", "Where a device sits on this host (always 1): its chip, "
       "/dev node and NUMA node (sysfs), and for TPUs the libtpu metrics service its numbers "
       "come from.", (*DEVICE, "chip", "device_path", "numa_node", "runtime_address"),
       "Snapshot.devices[].chip_index, device_path, numa_node, runtime_address"),
)

_RT = "Snapshot.runtime_services[]"
_RUNTIME_METRICS = (
    _g("xmon_runtime_service_up", "1 if the accelerator runtime's metrics service answered "
       "this period (libtpu ListSupportedMetrics), 0 if not: no job runs, or it runs without "
       "the metrics server.", RUNTIME, "", _RT + ".up"),
    _g("xmon_runtime_service_metrics", "Metrics the service lists (libtpu "
       "ListSupportedMetrics).", RUNTIME, "", f"len({_RT}.supported)"),
    _g("xmon_runtime_value", "A gauge the runtime serves that has no series of its own here, "
       "as served: the unit is the one its metric label names.",
       RUNTIME_POINT, "", _RT + ".metrics[] (gauge)"),
    _c("xmon_runtime_increments_total", "A counter the runtime serves, as served (cumulative "
       "since the runtime started).", RUNTIME_POINT, "", _RT + ".metrics[] (counter)"),
    MetricSpec("xmon_runtime_latency_seconds", "histogram", "A time distribution the runtime "
               "serves (libtpu's microsecond distributions: transfer, collective and HLO "
               "execution latencies), in seconds, cumulative since the runtime started.",
               RUNTIME_POINT, "seconds", _RT + ".metrics[] (distribution, unit seconds)"),
    MetricSpec("xmon_runtime_distribution", "histogram", "Any other distribution the runtime "
               "serves (sizes, rates), as served: the unit is the one its metric label names.",
               RUNTIME_POINT, "", _RT + ".metrics[] (distribution)"),
    MetricSpec("xmon_runtime_quantiles", "summary", "A summary the runtime serves, as served.",
               RUNTIME_POINT, "", _RT + ".metrics[] (summary)"),
)
_DEVICE_METRICS = (
    _i("xmon_device_info", "An accelerator found on this host by a hardware collector "
       "(always 1). device is the collector's local index.",
       (*DEVICE, "uuid", "pci_bus_id", "source"), "Snapshot.devices[]"),
    _g("xmon_device_memory_used_bytes", "Device memory in use by all processes (NVML or "
       "libtpu runtime metrics).", DEVICE, "bytes", _HW + "memory_used_bytes"),
    _g("xmon_device_memory_total_bytes", "Device memory capacity (NVML or libtpu).",
       DEVICE, "bytes", _HW + "memory_total_bytes"),
    _g("xmon_device_utilization_ratio", "Fraction of time a kernel ran (NVML utilization.gpu).",
       DEVICE, "ratio", _HW + "utilization_ratio"),
    _g("xmon_device_duty_cycle_ratio", "Fraction of time the TensorCore was busy (libtpu "
       "duty_cycle_pct / 100).", DEVICE, "ratio", _HW + "duty_cycle_ratio"),
    _g("xmon_device_power_watts", "Power draw (NVML).", DEVICE, "watts", _HW + "power_watts"),
    _g("xmon_device_temperature_celsius", "Temperature (NVML).",
       DEVICE, "celsius", _HW + "temperature_celsius"),
    *_GPU_METRICS,
    *_TPU_METRICS,
)

_HOST_METRICS = (
    _i("xmon_host_info", "This host (always 1).", ("hostname", "cpu_count"), "Snapshot.host"),
    _i("xmon_slice_info", "This host's place in a multi-host TPU slice (always 1; absent when "
       "unknown): slice name, slice_index within a multislice job, worker within the slice. "
       "From the [host] config table, XMON_SLICE/XMON_WORKER, the TPU runtime's environment "
       "or the TPU VM's metadata (see docs/deploy.md).",
       ("slice", "slice_index", "worker", "num_slices", "num_workers", "accelerator_type",
        "source"), "Snapshot.slice_info"),
    _g("xmon_host_cpu_utilization_ratio", "CPU use of the host, all cores together (psutil).",
       (), "ratio", "Snapshot.host.cpu_utilization_ratio"),
    _g("xmon_host_memory_total_bytes", "Host memory (psutil).",
       (), "bytes", "Snapshot.host.memory_total_bytes"),
    _g("xmon_host_memory_used_bytes", "Host memory in use (psutil).",
       (), "bytes", "Snapshot.host.memory_used_bytes"),
    _g("xmon_host_memory_available_bytes", "Host memory available without swapping (psutil).",
       (), "bytes", "Snapshot.host.memory_available_bytes"),
    _g("xmon_host_load1", "1-minute load average (os.getloadavg).",
       (), "", "Snapshot.host.load_average_1m"),
    _g("xmon_host_finding", "Findings of this kind and severity the daemon holds about the "
       "host rather than one job (xmon doctor shows their evidence and fix; docs/doctor.md): "
       "kind is tpu_metrics_unreachable, nvml_unavailable, gpu_preallocated, or ended_job (a job "
       "that ended with an out-of-memory or leak finding, kept an hour).",
       ("kind", "severity"), "", "Snapshot.findings[]"),
)

_DAEMON_METRICS = (
    _i("xmon_build_info", "The xmon daemon's build (always 1).",
       ("version", "python_version", "schema_version"), "Snapshot.daemon.version"),
    _g("xmon_up", "1 once the daemon has taken its first snapshot, 0 before.", (), "", "exporter"),
    _g("xmon_daemon_start_time_seconds", "Unix time the daemon started.",
       (), "seconds", "Snapshot.daemon.started_at"),
    _g("xmon_daemon_goodput_floor_ratio", "The daemon's goodput_floor: a job's goodput below "
       "it is the low_goodput finding and the alert XmonJobLowGoodput.",
       (), "", "Snapshot.daemon.goodput_floor"),
    _g("xmon_snapshot_timestamp_seconds", "Unix time of the snapshot these metrics come from.",
       (), "seconds", "Snapshot.wall_time"),
    _g("xmon_agents_connected", "Agents connected to the daemon.",
       (), "", "Snapshot.daemon.agents_connected"),
    _c("xmon_daemon_reports_received_total", "Reports received from agents.",
       (), "", "Snapshot.daemon.reports_received_total"),
    _c("xmon_daemon_reports_rejected_total", "Reports rejected (malformed or wrong version).",
       (), "", "Snapshot.daemon.reports_rejected_total"),
    _c("xmon_daemon_agent_disconnects_total", "Agent streams that ended.",
       (), "", "Snapshot.daemon.agents_disconnected_total"),
    _c("xmon_daemon_config_reloads_total", "Configuration reloads (SIGHUP) that took effect.",
       (), "", "Snapshot.daemon.config_reloads_total"),
    _c("xmon_daemon_config_reload_failures_total",
       "Configuration reloads refused because the new configuration was invalid (the running "
       "one was kept; the daemon's log says why).",
       (), "", "Snapshot.daemon.config_reload_failures_total"),
    _g("xmon_daemon_config_last_reload_successful",
       "1 if the last configuration reload succeeded (or none was attempted).",
       (), "", "Snapshot.daemon.config_last_reload_successful"),
    _c("xmon_daemon_refused_total", "What one of the daemon's resource bounds refused or "
       "dropped (a flood or a buggy client): bound names the limit (docs/reliability.md).",
       ("bound",), "", "Snapshot.daemon.refused_total"),
    _g("xmon_collector_up", "1 if the collector's last run succeeded.",
       COLLECTOR, "", "Snapshot.collectors[].up"),
    _c("xmon_collector_errors_total", "Failed runs of the collector.",
       COLLECTOR, "", "Snapshot.collectors[].errors_total"),
    _g("xmon_collector_duration_seconds", "Duration of the collector's last run.",
       COLLECTOR, "seconds", "Snapshot.collectors[].duration_seconds"),
    _g("xmon_collector_present", "1 if the collector's hardware or service is on this host "
       "(0 is not an error).", COLLECTOR, "", "Snapshot.collectors[].present"),
)

_CAPTURE = (*JOB, "kind", "trigger")
_PROFILING_METRICS = (
    _c("xmon_job_captures_total", "Captures the daemon ran in the job: kind is trace or memory "
       "(device memory profile); trigger is manual (xmon capture), step_time or memory (rules in "
       "[profiling]). The reason of the last one is in the snapshot and next to its files.",
       _CAPTURE, "", "Job.captures[].ok_total"),
    _c("xmon_job_capture_failures_total", "Captures that failed (busy, disk full, logdir not "
       "writable, job gone).", _CAPTURE, "", "Job.captures[].failed_total"),
    _g("xmon_job_last_capture_timestamp_seconds", "Unix time of the last successful capture.",
       _CAPTURE, "seconds", "Job.captures[].last_at"),
    _g("xmon_exporter_up", "1 if the exporter's last write succeeded (tensorboard: the logdir).",
       ("exporter",), "", "Snapshot.exporters[].up"),
    _c("xmon_exporter_errors_total", "Failed writes of the exporter (unwritable logdir, disk "
       "full).", ("exporter",), "", "Snapshot.exporters[].errors_total"),
)

_FLEET_METRICS = (
    _i("xmon_job_fleet_info", "Which process of which multi-process JAX job this is (always 1): "
       "every process of one jax.distributed job has the same job_key (its coordinator address "
       "and process count, or XMON_JOB_KEY). A job that is not distributed has a key of its "
       "own. Join on (instance, job_name, pid). Absent until the job's backend is up.",
       (*JOB, "job_key", "process_index", "process_count", "slice_index", "worker"),
       "Job.fleet"),
    _c("xmon_job_steps_begun_total", "Steps begun: finished ones plus the one open now (step "
       "markers only). In a hang, processes that began a step the others did not are waiting "
       "for them.", JOB, "", "Job.steps.steps_begun_total"),
    _g("xmon_job_open_step_seconds", "How long the step open now has run; absent when no step "
       "is open.", JOB, "seconds", "Job.steps.open_step_seconds"),
    _g("xmon_job_stalled", "1 while the agent sees no step finish for max(10 x median step, "
       "20 s); waits_in says where its step thread waits: jax (on the device or a collective: "
       "waiting for another process), host (a lock, I/O, a data loader: the process that "
       "stopped first), or unknown. Absent when not stalled.",
       (*JOB, "waits_in"), "", "Job.steps.stall_waits_in"),
    _g("xmon_job_step_host_seconds", "Per step, the time this process's devices wait for its "
       "host to dispatch work: step time x (1 - device busy ratio), from the execution ledger. "
       "In a multi-process job the straggler has the most.",
       JOB, "seconds", "Job.step_breakdown.host_seconds"),
    _g("xmon_job_step_device_compute_seconds", "Per step, device time outside collective ops "
       "(execution ledger).", JOB, "seconds", "Job.step_breakdown.compute_seconds"),
    _g("xmon_job_step_device_collective_seconds", "Per step, device time in collective ops "
       "(all-reduce, all-gather, ...), waiting for the other processes included: the fast "
       "processes of a job with a straggler have the most.",
       JOB, "seconds", "Job.step_breakdown.collective_seconds"),
)

_GOODPUT_METRICS = (
    _g("xmon_job_wall_seconds", "Where the process's wall time went since it started, each "
       "second in one bucket: productive (stepping, devices busy), host_wait (stepping, devices "
       "waiting for the host), steps_unmeasured (stepping before a busy reading), startup, "
       "compile, checkpoint_save, checkpoint_restore (the job's thread blocked in a checkpoint), "
       "stall, idle (after the last step), unattributed. The buckets sum to the wall time "
       "(docs/goodput.md). A gauge: a tail of steps turns idle once past the stall threshold.",
       (*JOB, "bucket"), "seconds", "Job.goodput.seconds"),
    _g("xmon_job_goodput_ratio", "Productive share of the process's wall time: window is life "
       "(since the process started), 5m or 1h (the life where shorter). Absent before the "
       "execution ledger's first busy reading.",
       (*JOB, "window"), "", "Job.goodput.ratio"),
    _g("xmon_job_restart_lost_seconds", "What the restart that started this process cost: from "
       "the last step of the process it replaced (the same declared job key, XMON_JOB_KEY, or "
       "jax.distributed coordinator, and process index) to this one's first step. Absent when "
       "the process is no restart the daemon saw.",
       JOB, "seconds", "Job.goodput.restart_seconds"),
)

# fmt: on

GROUPS: tuple[tuple[str, tuple[MetricSpec, ...]], ...] = (
    ("Daemon and collectors", _DAEMON_METRICS),
    ("Host", _HOST_METRICS),
    ("Accelerators (hardware collectors)", _DEVICE_METRICS),
    ("Accelerator runtime services (libtpu metrics)", _RUNTIME_METRICS),
    ("Jobs: devices, compiles, programs", _JOB_METRICS),
    ("Jobs: steps and utilisation", _STEP_METRICS),
    ("Jobs: process and agent transport", _PROCESS_METRICS),
    ("Jobs: execution ledger", _LEDGER_METRICS),
    ("Jobs: processes of multi-process jobs (fleet)", _FLEET_METRICS),
    ("Jobs: goodput (the wall-time account)", _GOODPUT_METRICS),
    ("Profiling: captures and file exporters", _PROFILING_METRICS),
)
METRICS: tuple[MetricSpec, ...] = tuple(spec for _, specs in GROUPS for spec in specs)
SPEC_BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}

_INTRO = f"""\
# xmon metrics

Generated from `xmon/exporters/metrics_table.py` by
`python -m xmon.exporters.metrics_table > docs/metrics.md`; a test keeps the two equal. Metric
names are a contract: a rename is a changelog entry.

Conventions:

- Names start with `xmon_`, use base units (`_bytes`, `_seconds`, `_ratio` for 0-1), counters
  end in `_total`. Static facts are labels of `*_info` metrics whose value is always 1; join
  them at query time, e.g. `xmon_job_device_memory_in_use_bytes * on(job_name, pid, device)
  group_left(coords) xmon_job_device_info`.
- No label carries the host: Prometheus adds `instance` (and `job`, which is why a JAX job's
  name is `job_name`). Job series are keyed by `job_name` and `pid`; the series of a job that
  has gone disappear with it.
- A value xmon does not know (a stat the backend lacks, a job that has not stepped yet) is
  absent, never 0.
- Per-program series are capped per job (default 50): the programs that spent the most FLOP/s
  in the job's latest trace capture (executions per second times FLOPs), then those with the
  most FLOPs (times devices), then the longest compile, keep their own series; the rest are
  folded into one series with `program="{OTHER_PROGRAM}"` (sums; the largest peak memory).
- Label values taken from jobs (job and program names) are cut to {LABEL_VALUE_MAX} characters.
- Two utilisations: `xmon_job_hardware_flops_utilization_ratio` (HFU) counts every FLOP XLA
  says ran (loop-aware; rematerialisation and optimizer included) and exists wherever the peak
  is known; `xmon_job_model_flops_utilization_ratio` (MFU, PaLM's definition) counts only the
  model FLOPs the job declares (`xmon.declare_model_flops(...)` or `xmon.step(flops=...)`) and
  is absent without a declaration.
  Where `xmon_job_flops_lower_bound` is 1, hardware FLOPs and HFU are lower bounds; where
  `xmon_job_flops_upper_bound` is 1 (a conditional's branches differ), upper bounds.
- Where `xmon_job_steps_inferred` is 1 the job marks no steps: step counts, times and rates are
  the executions of its dominant repeated program.
"""


def render_markdown() -> str:
    """The reference page docs/metrics.md, one table per group."""
    parts = [_INTRO]
    for title, specs in GROUPS:
        parts.append(
            f"\n## {title}\n\n| name | type | labels | help | from |\n|---|---|---|---|---|\n"
        )
        parts.extend(_row(spec) for spec in specs)
    return "".join(parts)


def _row(spec: MetricSpec) -> str:
    labels = ", ".join(f"`{label}`" for label in spec.labels) or "-"
    cells = (f"`{spec.name}`", spec.type, labels, spec.help.replace("|", "\\|"), f"`{spec.source}`")
    return "| " + " | ".join(cells) + " |\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
