"""The one snapshot data model every exporter and view consumes.

Everything here is a frozen dataclass of plain values. ``None`` always means "not available
here" (an unsupported counter, a backend without the stat, a job that has not stepped yet);
exporters skip it rather than printing 0. This module imports nothing else of xmon, so the
daemon, the exporters and the views can all depend on it without pulling in jax.

Snapshots travel to views as JSON (:func:`snapshot_to_dict` / :func:`snapshot_from_dict`), so
the field names here are also the keys of ``xmon monitor`` and of the subscribe stream.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class HostSample:
    """Host-wide numbers, from psutil."""

    hostname: str
    cpu_count: int
    cpu_utilization_ratio: float | None  # psutil.cpu_percent() / 100, all cores together
    memory_total_bytes: int
    memory_used_bytes: int
    memory_available_bytes: int
    load_average_1m: float | None = None
    per_cpu_utilization_ratio: tuple[float, ...] = ()


@dataclass(frozen=True)
class SliceInfo:
    """Where this host sits in a multi-host TPU slice (or any fleet grouping set in config).

    Resolved once when the daemon starts (xmon.daemon.topology): the ``[host]`` table of the config
    file and ``XMON_SLICE``/``XMON_WORKER`` win over the TPU runtime's environment
    (``MEGASCALE_SLICE_ID``, ``TPU_WORKER_ID``, ...), which wins over the TPU VM's GCE
    metadata (``tpu-env``). ``None`` fields are unknown here.
    """

    slice: str | None = None  # slice name: config, XMON_SLICE, or tpu-env NODE_ID (TPU name)
    slice_index: int | None = None  # MEGASCALE_SLICE_ID: this slice within a multislice job
    worker: int | None = None  # TPU_WORKER_ID / tpu-env WORKER_ID: host within the slice
    num_slices: int | None = None  # MEGASCALE_NUM_SLICES
    num_workers: int | None = None  # hosts in the slice (TPU_WORKER_HOSTNAMES entries)
    accelerator_type: str | None = None  # TPU_ACCELERATOR_TYPE / tpu-env ACCELERATOR_TYPE
    source: str = ""  # where the values came from, e.g. "config,env"


@dataclass(frozen=True)
class DeviceInfo:
    """Static facts about one PJRT device, as ``jax.Device`` reports them."""

    id: int  # jax.Device.id (global id)
    platform: str  # "cpu" | "gpu" | "tpu" | plugin name
    device_kind: str  # e.g. "TPU v6 lite", "NVIDIA H100 80GB HBM3", "cpu"
    process_index: int = 0
    local_hardware_id: int | None = None
    coords: tuple[int, ...] | None = None  # TPU chip coordinates (absent on CPU)
    core_on_chip: int | None = None
    slice_index: int | None = None


@dataclass(frozen=True)
class DeviceMemory:
    """PJRT allocator statistics of one device inside one job.

    Fields mirror the keys of ``jax.Device.memory_stats()`` (tsl::AllocatorStats); each is
    optional because allocators differ. On CPU, where memory_stats() is None, only
    ``live_array_bytes`` (sum of ``nbytes`` of ``jax.live_arrays()`` on the device) is set.
    """

    bytes_in_use: int | None = None
    peak_bytes_in_use: int | None = None
    bytes_limit: int | None = None
    bytes_reserved: int | None = None
    peak_bytes_reserved: int | None = None
    bytes_reservable_limit: int | None = None
    largest_free_block_bytes: int | None = None
    largest_alloc_size: int | None = None
    num_allocs: int | None = None
    pool_bytes: int | None = None
    peak_pool_bytes: int | None = None
    live_array_bytes: int | None = None
    # Wall clock of the live-array reading (paced, taken at rest: it can be older than the
    # report); None with allocator stats, which are read for every report.
    live_array_read_at: float | None = None
    # derived, see xmon.analysis.derived.fragmentation_ratio
    fragmentation_ratio: float | None = None
    extra: dict[str, int] = field(default_factory=dict)  # keys this version does not know yet

    @property
    def in_use_bytes(self) -> int | None:
        """Best available "live bytes": allocator stat, else the live-array sum."""
        return self.bytes_in_use if self.bytes_in_use is not None else self.live_array_bytes

    @property
    def read_at(self) -> float | None:
        """When ``in_use_bytes`` was read, where that is not the report's own time."""
        return None if self.bytes_in_use is not None else self.live_array_read_at


@dataclass(frozen=True)
class JobDevice:
    """A device as one job sees it: static info plus that job's allocator stats."""

    info: DeviceInfo
    memory: DeviceMemory
    # Share of the sampled time this device ran the job's programs (the execution ledger:
    # union of its XLA op intervals in the profiler samples). None before any sample.
    busy_ratio: float | None = None


@dataclass(frozen=True)
class HardwareCounters:
    """Counters read from outside any job (NVML, libtpu runtime metrics)."""

    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_ratio: float | None = None
    duty_cycle_ratio: float | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None
    # GPU (NVML, see xmon.collectors.nvml). Rates cover the last period; *_total are counters.
    memory_reserved_bytes: int | None = None  # nvmlDeviceGetMemoryInfo_v2 .reserved (driver)
    memory_busy_ratio: float | None = None  # nvmlDeviceGetUtilizationRates().memory / 100
    sm_active_ratio: float | None = None  # GPM NVML_GPM_METRIC_SM_UTIL / 100 (Hopper+)
    sm_occupancy_ratio: float | None = None  # GPM NVML_GPM_METRIC_SM_OCCUPANCY / 100
    tensor_active_ratio: float | None = None  # GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL / 100
    dram_active_ratio: float | None = None  # GPM NVML_GPM_METRIC_DRAM_BW_UTIL / 100
    power_limit_watts: float | None = None  # nvmlDeviceGetEnforcedPowerLimit / 1000
    energy_joules_total: float | None = None  # nvmlDeviceGetTotalEnergyConsumption / 1000
    sm_clock_hertz: float | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM) * 1e6
    memory_clock_hertz: float | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) * 1e6
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    nvlink_tx_bytes_per_second: float | None = None  # all links together
    nvlink_rx_bytes_per_second: float | None = None
    ecc_corrected_errors_total: int | None = None  # volatile: since the driver loaded
    ecc_uncorrected_errors_total: int | None = None
    ecc_corrected_errors_aggregate_total: int | None = None  # aggregate: device lifetime
    ecc_uncorrected_errors_aggregate_total: int | None = None
    xid_errors_total: int | None = None  # XID events seen since the daemon started
    last_xid: int | None = None  # code of the latest of those events
    # TPU (libtpu runtime metrics service, see xmon.collectors.tpu).
    memory_bandwidth_utilization_ratio: float | None = None  # tpu.runtime.hbm.utilization.percent
    idle_seconds: float | None = None  # tpu.runtime.tensorcore.idle_duration.seconds


@dataclass(frozen=True)
class DeviceProcess:
    """A process holding memory on a device, as the hardware collector sees it.

    For NVML: nvmlDeviceGetComputeRunningProcesses (pid as the host's PID namespace sees it).
    """

    pid: int
    memory_used_bytes: int | None = None  # usedGpuMemory; None where the driver cannot tell


@dataclass(frozen=True)
class Device:
    """A physical accelerator on this host, found by a hardware collector."""

    index: int
    platform: str
    device_kind: str
    source: str  # collector name
    hardware: HardwareCounters
    uuid: str | None = None
    pci_bus_id: str | None = None
    pids: tuple[int, ...] = ()
    processes: tuple[DeviceProcess, ...] = ()  # per-process memory where the source has it
    device_path: str | None = None  # the /dev node its owners hold: /dev/vfio/N, /dev/accelN
    numa_node: int | None = None  # sysfs numa_node of the PCI function; None when -1 or unknown
    chip_index: int | None = None  # TPU: chip it sits on (two devices per chip on v2, v3, 7x)
    runtime_address: str | None = None  # TPU: the libtpu metrics service its counters came from


@dataclass(frozen=True, slots=True)
class Branch:
    """One branch of a conditional (xmon.execution.loop_cost): its cost per run, per device,
    as the program's figures count it, and the instructions whose profiler events mark a run
    of it."""

    flops: float  # loop-aware, with the GEMM custom-calls XLA leaves out
    bytes_accessed: float
    # Instructions at the branch's top level that run kernels or ops (fusions, calls, loops):
    # each runs once a run of the branch; none where the branch runs nothing of its own
    ops: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conditional:
    """A conditional (lax.cond, lax.switch) whose branches do different work: the program's
    figures count its costliest branch every run, until samples show which ones run
    (xmon.execution.branches)."""

    name: str  # the conditional instruction, as the profiler names its op
    branches: tuple[Branch, ...]
    # What the program's figures count for one run of it: XLA's costliest branch per figure
    # (its FLOPs and its GEMM custom-calls' each the most of any branch)
    counted_flops: float = 0.0
    counted_bytes_accessed: float = 0.0


# Slots: the daemon holds up to 4,096 programs per job, ~1.2 KiB less each without a __dict__.
@dataclass(frozen=True, slots=True, weakref_slot=True)
class Program:
    """One compiled XLA executable, with XLA's cost and memory analysis.

    Cost numbers are per device for SPMD-partitioned programs (that is how XLA reports them);
    ``num_devices`` says how many devices run it.
    """

    fingerprint: str
    name: str  # HLO module name, e.g. "jit_train_step"
    fun_name: str | None = None  # as jax.monitoring names it, e.g. "jit(train_step)"
    # Best estimate of one execution, per device: XLA's count with every while-loop body
    # counted once per trip (xmon.execution.loop_cost), plus GEMM custom-calls it omits.
    flops: float | None = None
    flops_xla: float | None = None  # Compiled.cost_analysis()["flops"] as reported (bodies once)
    custom_call_flops: float | None = None  # GEMM custom-calls counted from optimized HLO
    transcendentals: float | None = None
    bytes_accessed: float | None = None  # loop-aware, like flops
    bytes_accessed_xla: float | None = None  # cost_analysis()["bytes accessed"] as reported
    flops_lower_bound: bool = False  # a loop of unknown trip count: costs are lower bounds
    # a conditional whose branches do different work: XLA counts its costliest branch, so the
    # FLOPs are at most this for a run that takes a cheaper one
    flops_upper_bound: bool = False
    loops: int = 0  # while loops in the optimized HLO
    loops_unknown_trip_count: int = 0
    # Those conditionals, described where every one of them could be (none otherwise): the
    # daemon counts the branches its samples see run in their place (flops_branch_mix).
    conditionals: tuple[Conditional, ...] = ()
    # flops and bytes_accessed count each conditional's branches as often as the execution
    # ledger's samples saw them run, not its costliest every time (no longer an upper bound)
    flops_branch_mix: bool = False
    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    peak_memory_bytes: int | None = None
    num_devices: int = 1
    compile_seconds: float | None = None
    compiled_at: float | None = None  # wall clock
    cache_hit: bool = False  # came from the persistent compilation cache
    in_step: bool = False  # compiled while a step was running: counted in FLOPs per step
    # HLO module ids of its executables (HloModuleProto.id), which the profiler records as
    # ``program_id`` on every traced op; read on the agent's thread after the compile. A
    # recompile of the same program adds the new executable's ids.
    program_ids: tuple[int, ...] = ()
    # Executions counted in the job's most recent trace capture the daemon could read (xmon
    # capture or a triggered one; xmon.daemon.executions). None before any such capture, and
    # for programs whose module ids are unknown or that were compiled after that trace.
    executions: int | None = None
    executions_per_second: float | None = None  # executions / executions_window_seconds
    executions_window_seconds: float | None = None  # how long that trace recorded
    executions_counted_at: float | None = None  # wall clock when that trace ended
    executions_source: str | None = None  # "ledger" (sampled) | "capture" (a full trace)
    executions_per_step: float | None = None  # ledger: e.g. 4 for 4 micro-batches a step
    # Mean device time of one execution on one device, from the same samples.
    device_seconds_per_execution: float | None = None


@dataclass(frozen=True)
class CompileEvent:
    fun_name: str
    duration_seconds: float
    wall_time: float
    cache_hit: bool = False


@dataclass(frozen=True)
class CompileStats:
    """Cumulative compile activity of a job, from jax.monitoring events."""

    compiles_total: int = 0  # /jax/core/compile/backend_compile_duration events
    recompiles_total: int = 0  # compiles of a fun_name compiled before (new shapes/dtypes)
    backend_compile_seconds_total: float = 0.0
    trace_seconds_total: float = 0.0  # /jax/core/compile/jaxpr_trace_duration
    lowering_seconds_total: float = 0.0  # /jax/core/compile/jaxpr_to_mlir_module_duration
    cache_requests_total: int = 0  # /jax/compilation_cache/compile_requests_use_cache
    cache_hits_total: int = 0
    cache_misses_total: int = 0
    recent: tuple[CompileEvent, ...] = ()
    # Recompiles once the job is past warm-up (xmon.analysis.compiles.is_steady): what the
    # storm alert counts. Eager primitive compiles (jax's apply_primitive) never count.
    steady_recompiles_total: int = 0
    eager_compiles_total: int = 0


@dataclass(frozen=True)
class StepStats:
    """Step timing. A step's time is the interval between consecutive step starts, which needs
    no device synchronisation and equals the true step time once dispatch is backpressured."""

    steps_total: int = 0
    step_seconds_total: float = 0.0
    last_step_seconds: float | None = None
    p50_step_seconds: float | None = None
    p90_step_seconds: float | None = None
    p99_step_seconds: float | None = None
    steps_per_second: float | None = None
    # Hardware FLOPs per step, all devices together: programs' loop-aware FLOPs times their
    # executions per step in the execution ledger (so warm-up-compiled, AOT, repeated and
    # every-N-steps programs all count).
    flops_per_step: float | None = None
    bytes_per_step: float | None = None
    model_flops_per_step: float | None = None  # declared by the user (xmon.step / attach)
    tokens_per_step: float | None = None  # declared with the model FLOPs
    window: tuple[float, ...] = ()  # recent step durations (bounded), newest last
    # No step markers: steps are the executions of the dominant repeated program (as XProf
    # does without step annotations). Markers win when present.
    inferred: bool = False
    inferred_from: str | None = None  # that program's name
    # On the daemon's clock since steps_total last moved (xmon.findings.tracker); None before
    # the first step.
    seconds_since_last_step: float | None = None
    steps_begun_total: int = 0  # finished steps plus the one open now (step markers only)
    open_step_seconds: float | None = None  # how long the open step has run; None when none
    # While the agent sees no step finish for long: where its step thread waits, "jax" (on the
    # device or a collective) or "host" (anything else: a lock, I/O, a data loader).
    stall_waits_in: str | None = None

    @property
    def counted_total(self) -> int | None:
        """Steps counted: the marked steps' total, None while steps are inferred (they have a
        rate, from the ledger's samples, and no count: every view shows it absent, not 0)."""
        return None if self.inferred and not self.steps_total else self.steps_total


@dataclass(frozen=True)
class StepBreakdown:
    """Where one step's time goes on this process's devices, from the execution ledger
    (mean over the process's devices; xmon.execution.rates.step_breakdown).

    In a multi-process job every process's step takes as long as the slowest one's, so the
    step time hides a straggler. What differs is how the time splits: the straggler's devices
    wait longest for their host; the others wait in collectives for the straggler."""

    step_seconds: float
    compute_seconds: float  # device busy outside collective ops
    collective_seconds: float  # device time in collective ops, waits for other processes included
    host_seconds: float  # device idle: waiting for this process's host to dispatch work


@dataclass(frozen=True)
class Goodput:
    """Where the process's wall time went, from its start (xmon.goodput): each second in one
    bucket of ``seconds`` (``GOODPUT_BUCKETS``), which sum to ``wall_seconds``. Goodput is the
    productive share: time stepping with the devices busy."""

    wall_seconds: float
    seconds: tuple[tuple[str, float], ...]  # (bucket, seconds) in GOODPUT_BUCKETS order
    ratio: float | None  # productive / wall over the process's life; None before a busy reading
    ratio_5m: float | None  # over the last 5 minutes (the life where shorter)
    ratio_1h: float | None
    biggest_badput: str | None  # the bucket other than productive holding the most time
    steps_marked: bool = True  # else stepping is counted from the first compile
    # From the last step of the process this one replaced (the same declared job key and
    # process index) to this one's first step: what the restart cost, before this process's
    # own account (xmon.goodput.restarts). None: not a restart, or not known.
    restart_seconds: float | None = None

    def bucket(self, name: str) -> float:
        return dict(self.seconds).get(name, 0.0)


# Goodput buckets, in the order views show them (xmon.goodput.split).
GOODPUT_BUCKETS = (
    "productive",
    "host_wait",
    "steps_unmeasured",
    "startup",
    "compile",
    "checkpoint_save",
    "checkpoint_restore",
    "stall",
    "idle",
    "unattributed",
)


@dataclass(frozen=True)
class FleetIdentity:
    """Which process of which multi-process job this is (xmon.agent.identity): every process
    of one jax.distributed job reports the same job key."""

    job_key: str
    process_index: int = 0
    process_count: int = 1
    slice_index: int | None = None
    worker: str = ""
    distributed: bool = False
    job_key_declared: bool = False


@dataclass(frozen=True)
class Utilization:
    """Derived live efficiency of a job (see xmon.analysis.derived)."""

    achieved_flops_per_second: float | None = None  # hardware FLOP/s (XLA's loop-aware count)
    achieved_bytes_per_second: float | None = None
    achieved_model_flops_per_second: float | None = None  # declared model FLOPs x steps/s
    peak_flops_per_second: float | None = None  # all devices of the job together
    peak_bytes_per_second: float | None = None
    # MFU: declared model FLOPs (e.g. 6 N tokens) per second over peak (PaLM's definition);
    # None without a declaration. HFU: the FLOPs XLA counts (remat, optimizer included).
    model_flops_utilization_ratio: float | None = None
    hardware_flops_utilization_ratio: float | None = None
    memory_bandwidth_utilization_ratio: float | None = None
    flops_lower_bound: bool = False  # some program's FLOPs could not be fully counted
    flops_upper_bound: bool = False  # some program's FLOPs count a conditional's costliest branch
    tokens_per_second: float | None = None


@dataclass(frozen=True)
class ProcessSample:
    """The job's process as the host collector sees it (psutil)."""

    cpu_utilization_ratio: float | None  # of one core; may exceed 1 with threads
    cpu_seconds_total: float | None
    resident_memory_bytes: int | None
    num_threads: int | None = None
    # Threads of the process waiting for a CPU, on average: run-queue seconds per wall second,
    # summed over its threads (/proc/PID/task/*/schedstat). High on an oversubscribed host.
    cpu_wait_threads: float | None = None


@dataclass(frozen=True)
class AgentHealth:
    """The agent's own transport counters (cumulative since attach)."""

    reports_sent_total: int = 0
    reports_dropped_total: int = 0
    events_dropped_total: int = 0
    reconnects_total: int = 0
    overhead_seconds_total: float = 0.0  # time spent in the agent's own thread
    ledger_samples_total: int = 0  # execution samples taken (profiler sessions in memory)
    ledger_samples_skipped_total: int = 0  # not taken: profiler busy, or sample too large
    ledger_samples_busy_total: int = 0  # of those, the profiler busy (the job's own trace)
    ledger_next_sample_at: float | None = None  # wall clock; None while one records


@dataclass(frozen=True)
class Capability:
    """One capability of the agent on the job's jax and Python (xmon.agent.internals): the
    ledger, the program catalogue, loop costs, recompile causes, stall stacks, memory readings,
    the job identity. Each stands on a private jax or CPython detail that a release may move."""

    name: str
    unavailable_reason: str = ""  # "" where available; else what is missing or failed

    @property
    def available(self) -> bool:
        return not self.unavailable_reason


@dataclass(frozen=True)
class LedgerStats:
    """The execution ledger of a job as the daemon holds it (xmon.execution.ledger)."""

    samples: int = 0  # samples in the window the rates come from
    sampled_seconds: float = 0.0  # profiler time those samples cover
    window_seconds: float = 0.0  # wall time from the first to the last of them
    last_sample_at: float | None = None  # wall clock
    parse_errors_total: int = 0  # samples the daemon could not read
    # What the daemon asked the agent's samples to last, where the job's steps are too long for
    # the configured sample to hold whole periods of its busiest program (no markers), or a
    # program rarer than the steps too seldom for two of its runs in one; None where it asked
    # nothing (or took its ask back)
    sample_seconds_asked: float | None = None
    # The longest the daemon asked the samples to record (beyond whole steps), where they were
    # refused for their size (more events or bytes than it reads); None where it asked no limit
    sample_seconds_most: float | None = None
    samples_dropped_total: int = 0  # arrived while one was being read, or over the size cap
    # The program last seen starting an execution, in the latest sample that saw any (kept past
    # the window: a stalled job's samples show nothing), and the wall clock of that sample's end
    last_program: str | None = None
    last_program_seen_at: float | None = None


@dataclass(frozen=True)
class Job:
    """One JAX process with the agent attached."""

    job_name: str
    pid: int
    hostname: str
    platform: str
    jax_version: str
    jaxlib_version: str
    process_index: int = 0
    process_count: int = 1
    argv: tuple[str, ...] = ()
    started_at: float = 0.0  # wall clock of attach
    # The daemon found the claimed pid to have connected to its socket (xmon.daemon.peers);
    # False where it could not check (a pid namespace it cannot see, not Linux, verify_pids off).
    pid_verified: bool = False
    last_report_at: float = 0.0  # wall clock
    devices: tuple[JobDevice, ...] = ()
    compile: CompileStats = field(default_factory=CompileStats)
    programs: tuple[Program, ...] = ()
    steps: StepStats = field(default_factory=StepStats)
    utilization: Utilization = field(default_factory=Utilization)
    process: ProcessSample | None = None
    agent: AgentHealth = field(default_factory=AgentHealth)
    captures: tuple[CaptureCount, ...] = ()  # traces and memory profiles the daemon asked for
    ledger: LedgerStats = field(default_factory=LedgerStats)
    findings: tuple[Finding, ...] = ()  # diagnoses of this job (xmon.findings), worst first
    fleet: FleetIdentity | None = None  # None until the job's backend is up
    step_breakdown: StepBreakdown | None = None  # None before a ledger sample with a step rate
    goodput: Goodput | None = None  # None from an agent that sends no wall-time account
    capabilities: tuple[Capability, ...] = ()  # as the agent reports them; () from older agents


@dataclass(frozen=True)
class Finding:
    """One diagnosis of one job (or of the host): what is wrong, since when, the evidence and
    the fix.

    Built by the daemon's detectors (xmon.findings) from the job's own numbers each tick; host
    findings (``Snapshot.findings``) from the devices, collectors and runtime services.
    """

    kind: str  # e.g. "recompile", "stall", "host_bound", "memory_leak", "no_steps"
    severity: str  # "info" | "warning" | "error"
    summary: str  # one line
    since: float  # wall clock when the condition was first seen (this daemon's run)
    evidence: tuple[tuple[str, str], ...] = ()  # (what, value) pairs that support it
    fix: str = ""
    subject: str | None = None  # what it is about, e.g. the recompiled function's name
    value: float | None = None  # the number the finding is about (see docs/doctor.md)
    detail: str = ""  # long evidence, e.g. every thread's Python stack


@dataclass(frozen=True)
class CaptureCount:
    """Captures of one kind and trigger the daemon ran in a job (xmon.daemon.capture)."""

    kind: str  # "trace" | "memory"
    trigger: str  # "manual" (xmon capture) | "step_time" | "memory" (xmon.daemon.triggers)
    ok_total: int = 0
    failed_total: int = 0
    last_at: float | None = None  # wall clock of the last successful one
    last_reason: str | None = None  # why it was taken, e.g. "step 1.2 s > 3 x median 0.02 s"
    last_paths: tuple[str, ...] = ()  # its files (.xplane.pb, or the .prof)
    last_error: str | None = None  # why the last failed one failed


@dataclass(frozen=True)
class ExporterHealth:
    """An exporter with a sink that can fail (TensorBoard logdir: unwritable, disk full)."""

    name: str
    up: bool
    errors_total: int = 0
    last_error: str | None = None
    target: str | None = None  # where it writes, e.g. the logdir


@dataclass(frozen=True)
class CollectorHealth:
    name: str
    up: bool
    errors_total: int = 0
    duration_seconds: float | None = None
    last_error: str | None = None
    present: bool = True  # False: the hardware is not on this host (not an error)


@dataclass(frozen=True)
class Distribution:
    """A distribution an accelerator runtime keeps (cumulative since it started).

    Values are in ``RuntimeMetric.unit`` (microsecond latencies arrive converted to seconds).
    ``buckets`` are Prometheus-style (upper bound, cumulative count) for the finite bounds only;
    the +Inf bucket is ``count``. ``quantiles`` (q, value) are interpolated from the buckets the
    way tpu-info does, or served as-is for summaries.
    """

    count: int
    sum: float | None = None  # Distribution.mean * count, or Summary.sample_sum
    min: float | None = None
    max: float | None = None
    buckets: tuple[tuple[float, int], ...] = ()
    quantiles: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class RuntimeMetric:
    """One data point of a metric the accelerator runtime serves, named as the runtime names
    it (libtpu ``ListSupportedMetrics``), for the metrics xmon has no dedicated field for."""

    name: str  # e.g. "megascale.dcn_transfer_latencies.microsecond.cumulative.distribution"
    kind: str  # "gauge" | "counter" | "distribution" | "summary"
    unit: str = ""  # "seconds" after conversion, else "" (the unit is whatever the name says)
    device: int | None = None  # xmon device index when the point names a device
    attributes: tuple[tuple[str, str], ...] = ()  # the point's other attributes, as text
    value: float | None = None  # gauge and counter
    distribution: Distribution | None = None  # distribution and summary


@dataclass(frozen=True)
class RuntimeService:
    """An accelerator runtime's metrics service as a hardware collector polled it this tick."""

    source: str  # collector name, e.g. "tpu"
    address: str  # e.g. "localhost:8431" or "unix:/run/tpu/metrics.sock"
    up: bool  # it answered ListSupportedMetrics
    error: str | None = None  # why not, e.g. "unavailable: connection refused"
    supported: tuple[str, ...] = ()  # every metric name it lists
    metrics: tuple[RuntimeMetric, ...] = ()


@dataclass(frozen=True)
class DaemonStats:
    version: str
    started_at: float
    agents_connected: int = 0
    reports_received_total: int = 0
    reports_rejected_total: int = 0
    agents_disconnected_total: int = 0
    config_reloads_total: int = 0  # SIGHUP reloads that took effect
    config_reload_failures_total: int = 0  # reloads refused (the running config was kept)
    config_last_reload_successful: bool = True
    # what each of the daemon's resource bounds refused or dropped
    # (xmon.exporters.metrics_table.REFUSAL_BOUNDS)
    refused_total: dict[str, int] = field(default_factory=dict)
    goodput_floor: float | None = None  # the daemon's goodput_floor (the low_goodput finding)


@dataclass(frozen=True)
class Snapshot:
    """Everything the daemon knows at one tick."""

    seq: int
    wall_time: float
    monotonic: float
    hostname: str
    daemon: DaemonStats
    host: HostSample | None = None
    devices: tuple[Device, ...] = ()
    jobs: tuple[Job, ...] = ()
    collectors: tuple[CollectorHealth, ...] = ()
    schema_version: int = SCHEMA_VERSION
    runtime_services: tuple[RuntimeService, ...] = ()  # e.g. each libtpu metrics server
    slice_info: SliceInfo | None = None  # this host's place in a TPU slice, if known
    exporters: tuple[ExporterHealth, ...] = ()  # as of the previous tick
    # Findings about the host rather than one job (xmon.findings.host): a runtime metrics
    # service out of reach, NVML missing beside a GPU, a card full of preallocated memory.
    findings: tuple[Finding, ...] = ()


# --- JSON round trip -------------------------------------------------------------------------

T = TypeVar("T")


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """Like :func:`dataclasses.asdict`, without its deep copies (the model is immutable, and
    the daemon converts every snapshot of every job each period)."""
    return _to_plain(snapshot)  # type: ignore[no-any-return]


# Fields the daemon keeps for itself and views do not get: what a program's conditionals are
# (the daemon reads its samples with them; views get what came of it, ``flops_branch_mix``).
NOT_SENT = {"Program": frozenset({"conditionals"})}


@functools.cache
def sent_fields(cls: type) -> tuple[str, ...]:
    """The fields of a model class a snapshot sends views."""
    held = NOT_SENT.get(cls.__name__, frozenset())
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in held)


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _to_plain(getattr(value, name)) for name in sent_fields(type(value))}
    if isinstance(value, tuple | list):
        return [_to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_plain(item) for key, item in value.items()}
    return value


def snapshot_from_dict(data: dict[str, Any]) -> Snapshot:
    return from_dict(Snapshot, data)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a (nested) model dataclass from :func:`dataclasses.asdict` output.

    Unknown keys are ignored so an older view can read a newer daemon's snapshots.
    """
    decoded: T = _decoder(typing.cast(type, cls))(data)
    return decoded


Decoder = Callable[[Any], Any]


@functools.cache
def _decoder(cls: type) -> Decoder:
    """A decoder for one model class, built once from its type hints: resolving the hints
    at every object took 90 % of decoding a 4,096-program snapshot (seconds, in a view that
    decodes one a second)."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    decoders = {f.name: _value_decoder(hints[f.name]) for f in fields}
    names = decoders.keys()
    nested = tuple((name, decoder) for name, decoder in decoders.items() if decoder is not _same)

    def decode(data: dict[str, Any]) -> Any:
        # A newer daemon's fields this view does not know are left out.
        kwargs = (
            dict(data) if data.keys() <= names else {k: v for k, v in data.items() if k in names}
        )
        for name, decode_value in nested:
            value = kwargs.get(name)
            if value is not None:
                kwargs[name] = decode_value(value)
        return cls(**kwargs)

    return decode


def _same(value: Any) -> Any:
    return value


def _value_decoder(hint: Any) -> Decoder:
    """A decoder for one field's value (never None: callers pass None through)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _value_decoder(options[0]) if len(options) == 1 else _same
    if origin is tuple:
        args = typing.get_args(hint)
        item = _value_decoder(args[0]) if args else _same
        if item is _same:
            return tuple
        return lambda value: tuple(None if v is None else item(v) for v in value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _decoder(hint)
    return _same
