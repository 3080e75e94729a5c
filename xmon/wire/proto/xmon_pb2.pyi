from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProtocolVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_VERSION_UNSPECIFIED: _ClassVar[ProtocolVersion]
    PROTOCOL_VERSION: _ClassVar[ProtocolVersion]
PROTOCOL_VERSION_UNSPECIFIED: ProtocolVersion
PROTOCOL_VERSION: ProtocolVersion

class DeviceInfo(_message.Message):
    __slots__ = ("id", "platform", "device_kind", "process_index", "local_hardware_id", "coords", "core_on_chip", "slice_index")
    ID_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    DEVICE_KIND_FIELD_NUMBER: _ClassVar[int]
    PROCESS_INDEX_FIELD_NUMBER: _ClassVar[int]
    LOCAL_HARDWARE_ID_FIELD_NUMBER: _ClassVar[int]
    COORDS_FIELD_NUMBER: _ClassVar[int]
    CORE_ON_CHIP_FIELD_NUMBER: _ClassVar[int]
    SLICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    id: int
    platform: str
    device_kind: str
    process_index: int
    local_hardware_id: int
    coords: _containers.RepeatedScalarFieldContainer[int]
    core_on_chip: int
    slice_index: int
    def __init__(self, id: _Optional[int] = ..., platform: _Optional[str] = ..., device_kind: _Optional[str] = ..., process_index: _Optional[int] = ..., local_hardware_id: _Optional[int] = ..., coords: _Optional[_Iterable[int]] = ..., core_on_chip: _Optional[int] = ..., slice_index: _Optional[int] = ...) -> None: ...

class AgentHello(_message.Message):
    __slots__ = ("protocol_version", "job_name", "pid", "hostname", "platform", "jax_version", "jaxlib_version", "process_index", "process_count", "argv", "started_at", "devices", "agent_version", "proves_process")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    JAX_VERSION_FIELD_NUMBER: _ClassVar[int]
    JAXLIB_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROCESS_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROVES_PROCESS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_name: str
    pid: int
    hostname: str
    platform: str
    jax_version: str
    jaxlib_version: str
    process_index: int
    process_count: int
    argv: _containers.RepeatedScalarFieldContainer[str]
    started_at: float
    devices: _containers.RepeatedCompositeFieldContainer[DeviceInfo]
    agent_version: str
    proves_process: bool
    def __init__(self, protocol_version: _Optional[int] = ..., job_name: _Optional[str] = ..., pid: _Optional[int] = ..., hostname: _Optional[str] = ..., platform: _Optional[str] = ..., jax_version: _Optional[str] = ..., jaxlib_version: _Optional[str] = ..., process_index: _Optional[int] = ..., process_count: _Optional[int] = ..., argv: _Optional[_Iterable[str]] = ..., started_at: _Optional[float] = ..., devices: _Optional[_Iterable[_Union[DeviceInfo, _Mapping]]] = ..., agent_version: _Optional[str] = ..., proves_process: _Optional[bool] = ...) -> None: ...

class ProveProcess(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class ProcessShown(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class DeviceMemorySample(_message.Message):
    __slots__ = ("device_id", "stats", "live_array_bytes", "live_array_read_at")
    class StatsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    LIVE_ARRAY_BYTES_FIELD_NUMBER: _ClassVar[int]
    LIVE_ARRAY_READ_AT_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    stats: _containers.ScalarMap[str, int]
    live_array_bytes: int
    live_array_read_at: float
    def __init__(self, device_id: _Optional[int] = ..., stats: _Optional[_Mapping[str, int]] = ..., live_array_bytes: _Optional[int] = ..., live_array_read_at: _Optional[float] = ...) -> None: ...

class CompileEvent(_message.Message):
    __slots__ = ("fun_name", "duration_seconds", "wall_time", "cache_hit")
    FUN_NAME_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    CACHE_HIT_FIELD_NUMBER: _ClassVar[int]
    fun_name: str
    duration_seconds: float
    wall_time: float
    cache_hit: bool
    def __init__(self, fun_name: _Optional[str] = ..., duration_seconds: _Optional[float] = ..., wall_time: _Optional[float] = ..., cache_hit: _Optional[bool] = ...) -> None: ...

class CompileCounters(_message.Message):
    __slots__ = ("compiles_total", "recompiles_total", "backend_compile_seconds_total", "trace_seconds_total", "lowering_seconds_total", "cache_requests_total", "cache_hits_total", "cache_misses_total", "steady_recompiles_total", "eager_compiles_total")
    COMPILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECOMPILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_COMPILE_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TRACE_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LOWERING_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CACHE_REQUESTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEADY_RECOMPILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EAGER_COMPILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    compiles_total: int
    recompiles_total: int
    backend_compile_seconds_total: float
    trace_seconds_total: float
    lowering_seconds_total: float
    cache_requests_total: int
    cache_hits_total: int
    cache_misses_total: int
    steady_recompiles_total: int
    eager_compiles_total: int
    def __init__(self, compiles_total: _Optional[int] = ..., recompiles_total: _Optional[int] = ..., backend_compile_seconds_total: _Optional[float] = ..., trace_seconds_total: _Optional[float] = ..., lowering_seconds_total: _Optional[float] = ..., cache_requests_total: _Optional[int] = ..., cache_hits_total: _Optional[int] = ..., cache_misses_total: _Optional[int] = ..., steady_recompiles_total: _Optional[int] = ..., eager_compiles_total: _Optional[int] = ...) -> None: ...

class FunctionCompiles(_message.Message):
    __slots__ = ("name", "compiles_total", "steady_recompiles_total", "eager", "first_compiled_at", "last_compiled_at", "changes", "arguments", "jax_explanation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMPILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEADY_RECOMPILES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EAGER_FIELD_NUMBER: _ClassVar[int]
    FIRST_COMPILED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPILED_AT_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    JAX_EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    compiles_total: int
    steady_recompiles_total: int
    eager: bool
    first_compiled_at: float
    last_compiled_at: float
    changes: _containers.RepeatedScalarFieldContainer[str]
    arguments: _containers.RepeatedScalarFieldContainer[str]
    jax_explanation: str
    def __init__(self, name: _Optional[str] = ..., compiles_total: _Optional[int] = ..., steady_recompiles_total: _Optional[int] = ..., eager: _Optional[bool] = ..., first_compiled_at: _Optional[float] = ..., last_compiled_at: _Optional[float] = ..., changes: _Optional[_Iterable[str]] = ..., arguments: _Optional[_Iterable[str]] = ..., jax_explanation: _Optional[str] = ...) -> None: ...

class StallReport(_message.Message):
    __slots__ = ("seconds_since_step", "median_step_seconds", "stacks", "step_thread_waits_in", "step_thread_in_program")
    SECONDS_SINCE_STEP_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    STEP_THREAD_WAITS_IN_FIELD_NUMBER: _ClassVar[int]
    STEP_THREAD_IN_PROGRAM_FIELD_NUMBER: _ClassVar[int]
    seconds_since_step: float
    median_step_seconds: float
    stacks: str
    step_thread_waits_in: str
    step_thread_in_program: str
    def __init__(self, seconds_since_step: _Optional[float] = ..., median_step_seconds: _Optional[float] = ..., stacks: _Optional[str] = ..., step_thread_waits_in: _Optional[str] = ..., step_thread_in_program: _Optional[str] = ...) -> None: ...

class ProgramInfo(_message.Message):
    __slots__ = ("fingerprint", "name", "fun_name", "flops", "flops_xla", "custom_call_flops", "transcendentals", "bytes_accessed", "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes", "peak_memory_bytes", "num_devices", "compile_seconds", "compiled_at", "cache_hit", "in_step", "program_ids", "bytes_accessed_xla", "flops_lower_bound", "loops", "loops_unknown_trip_count", "flops_upper_bound", "conditionals")
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FUN_NAME_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_XLA_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_FLOPS_FIELD_NUMBER: _ClassVar[int]
    TRANSCENDENTALS_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACCESSED_FIELD_NUMBER: _ClassVar[int]
    ARGUMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALIAS_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEMP_BYTES_FIELD_NUMBER: _ClassVar[int]
    GENERATED_CODE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_DEVICES_FIELD_NUMBER: _ClassVar[int]
    COMPILE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMPILED_AT_FIELD_NUMBER: _ClassVar[int]
    CACHE_HIT_FIELD_NUMBER: _ClassVar[int]
    IN_STEP_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_IDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACCESSED_XLA_FIELD_NUMBER: _ClassVar[int]
    FLOPS_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    LOOPS_FIELD_NUMBER: _ClassVar[int]
    LOOPS_UNKNOWN_TRIP_COUNT_FIELD_NUMBER: _ClassVar[int]
    FLOPS_UPPER_BOUND_FIELD_NUMBER: _ClassVar[int]
    CONDITIONALS_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    name: str
    fun_name: str
    flops: float
    flops_xla: float
    custom_call_flops: float
    transcendentals: float
    bytes_accessed: float
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    generated_code_bytes: int
    peak_memory_bytes: int
    num_devices: int
    compile_seconds: float
    compiled_at: float
    cache_hit: bool
    in_step: bool
    program_ids: _containers.RepeatedScalarFieldContainer[int]
    bytes_accessed_xla: float
    flops_lower_bound: bool
    loops: int
    loops_unknown_trip_count: int
    flops_upper_bound: bool
    conditionals: _containers.RepeatedCompositeFieldContainer[ConditionalCost]
    def __init__(self, fingerprint: _Optional[str] = ..., name: _Optional[str] = ..., fun_name: _Optional[str] = ..., flops: _Optional[float] = ..., flops_xla: _Optional[float] = ..., custom_call_flops: _Optional[float] = ..., transcendentals: _Optional[float] = ..., bytes_accessed: _Optional[float] = ..., argument_bytes: _Optional[int] = ..., output_bytes: _Optional[int] = ..., alias_bytes: _Optional[int] = ..., temp_bytes: _Optional[int] = ..., generated_code_bytes: _Optional[int] = ..., peak_memory_bytes: _Optional[int] = ..., num_devices: _Optional[int] = ..., compile_seconds: _Optional[float] = ..., compiled_at: _Optional[float] = ..., cache_hit: _Optional[bool] = ..., in_step: _Optional[bool] = ..., program_ids: _Optional[_Iterable[int]] = ..., bytes_accessed_xla: _Optional[float] = ..., flops_lower_bound: _Optional[bool] = ..., loops: _Optional[int] = ..., loops_unknown_trip_count: _Optional[int] = ..., flops_upper_bound: _Optional[bool] = ..., conditionals: _Optional[_Iterable[_Union[ConditionalCost, _Mapping]]] = ...) -> None: ...

class ConditionalCost(_message.Message):
    __slots__ = ("name", "branches", "counted_flops", "counted_bytes_accessed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BRANCHES_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FLOPS_FIELD_NUMBER: _ClassVar[int]
    COUNTED_BYTES_ACCESSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    branches: _containers.RepeatedCompositeFieldContainer[BranchCost]
    counted_flops: float
    counted_bytes_accessed: float
    def __init__(self, name: _Optional[str] = ..., branches: _Optional[_Iterable[_Union[BranchCost, _Mapping]]] = ..., counted_flops: _Optional[float] = ..., counted_bytes_accessed: _Optional[float] = ...) -> None: ...

class BranchCost(_message.Message):
    __slots__ = ("flops", "bytes_accessed", "ops")
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    BYTES_ACCESSED_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    flops: float
    bytes_accessed: float
    ops: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, flops: _Optional[float] = ..., bytes_accessed: _Optional[float] = ..., ops: _Optional[_Iterable[str]] = ...) -> None: ...

class StepCounters(_message.Message):
    __slots__ = ("steps_total", "step_seconds_total", "recent_step_seconds", "flops_per_step", "bytes_per_step", "tokens_per_step", "steps_begun_total", "open_step_seconds")
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECENT_STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FLOPS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_BEGUN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OPEN_STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    steps_total: int
    step_seconds_total: float
    recent_step_seconds: _containers.RepeatedScalarFieldContainer[float]
    flops_per_step: float
    bytes_per_step: float
    tokens_per_step: float
    steps_begun_total: int
    open_step_seconds: float
    def __init__(self, steps_total: _Optional[int] = ..., step_seconds_total: _Optional[float] = ..., recent_step_seconds: _Optional[_Iterable[float]] = ..., flops_per_step: _Optional[float] = ..., bytes_per_step: _Optional[float] = ..., tokens_per_step: _Optional[float] = ..., steps_begun_total: _Optional[int] = ..., open_step_seconds: _Optional[float] = ...) -> None: ...

class ProcessIdentity(_message.Message):
    __slots__ = ("job_key", "job_key_declared", "distributed", "process_index", "process_count", "slice_index", "worker")
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_DECLARED_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTED_FIELD_NUMBER: _ClassVar[int]
    PROCESS_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    SLICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    job_key: str
    job_key_declared: bool
    distributed: bool
    process_index: int
    process_count: int
    slice_index: int
    worker: str
    def __init__(self, job_key: _Optional[str] = ..., job_key_declared: _Optional[bool] = ..., distributed: _Optional[bool] = ..., process_index: _Optional[int] = ..., process_count: _Optional[int] = ..., slice_index: _Optional[int] = ..., worker: _Optional[str] = ...) -> None: ...

class AgentCounters(_message.Message):
    __slots__ = ("reports_sent_total", "reports_dropped_total", "events_dropped_total", "reconnects_total", "overhead_seconds_total", "ledger_samples_total", "ledger_samples_skipped_total", "ledger_samples_busy_total", "ledger_next_sample_at")
    REPORTS_SENT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REPORTS_DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EVENTS_DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECONNECTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEDGER_SAMPLES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEDGER_SAMPLES_SKIPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEDGER_SAMPLES_BUSY_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEDGER_NEXT_SAMPLE_AT_FIELD_NUMBER: _ClassVar[int]
    reports_sent_total: int
    reports_dropped_total: int
    events_dropped_total: int
    reconnects_total: int
    overhead_seconds_total: float
    ledger_samples_total: int
    ledger_samples_skipped_total: int
    ledger_samples_busy_total: int
    ledger_next_sample_at: float
    def __init__(self, reports_sent_total: _Optional[int] = ..., reports_dropped_total: _Optional[int] = ..., events_dropped_total: _Optional[int] = ..., reconnects_total: _Optional[int] = ..., overhead_seconds_total: _Optional[float] = ..., ledger_samples_total: _Optional[int] = ..., ledger_samples_skipped_total: _Optional[int] = ..., ledger_samples_busy_total: _Optional[int] = ..., ledger_next_sample_at: _Optional[float] = ...) -> None: ...

class ExecutionSample(_message.Message):
    __slots__ = ("started_at", "duration_seconds", "xspace", "step_begin_seconds", "steps_marked", "anchor_seconds")
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    XSPACE_FIELD_NUMBER: _ClassVar[int]
    STEP_BEGIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_MARKED_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_SECONDS_FIELD_NUMBER: _ClassVar[int]
    started_at: float
    duration_seconds: float
    xspace: bytes
    step_begin_seconds: _containers.RepeatedScalarFieldContainer[float]
    steps_marked: bool
    anchor_seconds: float
    def __init__(self, started_at: _Optional[float] = ..., duration_seconds: _Optional[float] = ..., xspace: _Optional[bytes] = ..., step_begin_seconds: _Optional[_Iterable[float]] = ..., steps_marked: _Optional[bool] = ..., anchor_seconds: _Optional[float] = ...) -> None: ...

class LiveArray(_message.Message):
    __slots__ = ("shape", "dtype", "sharding", "nbytes", "device_bytes")
    class DeviceBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHARDING_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BYTES_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    sharding: str
    nbytes: int
    device_bytes: _containers.ScalarMap[int, int]
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., sharding: _Optional[str] = ..., nbytes: _Optional[int] = ..., device_bytes: _Optional[_Mapping[int, int]] = ...) -> None: ...

class OomReport(_message.Message):
    __slots__ = ("wall_time", "error", "seen_by", "largest_arrays", "live_arrays_total", "live_bytes_total", "memory_profile", "memory_profile_note", "program", "program_source", "failed_allocation_bytes", "memory")
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SEEN_BY_FIELD_NUMBER: _ClassVar[int]
    LARGEST_ARRAYS_FIELD_NUMBER: _ClassVar[int]
    LIVE_ARRAYS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LIVE_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PROFILE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PROFILE_NOTE_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_SOURCE_FIELD_NUMBER: _ClassVar[int]
    FAILED_ALLOCATION_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    wall_time: float
    error: str
    seen_by: str
    largest_arrays: _containers.RepeatedCompositeFieldContainer[LiveArray]
    live_arrays_total: int
    live_bytes_total: int
    memory_profile: bytes
    memory_profile_note: str
    program: ProgramInfo
    program_source: str
    failed_allocation_bytes: int
    memory: _containers.RepeatedCompositeFieldContainer[DeviceMemorySample]
    def __init__(self, wall_time: _Optional[float] = ..., error: _Optional[str] = ..., seen_by: _Optional[str] = ..., largest_arrays: _Optional[_Iterable[_Union[LiveArray, _Mapping]]] = ..., live_arrays_total: _Optional[int] = ..., live_bytes_total: _Optional[int] = ..., memory_profile: _Optional[bytes] = ..., memory_profile_note: _Optional[str] = ..., program: _Optional[_Union[ProgramInfo, _Mapping]] = ..., program_source: _Optional[str] = ..., failed_allocation_bytes: _Optional[int] = ..., memory: _Optional[_Iterable[_Union[DeviceMemorySample, _Mapping]]] = ...) -> None: ...

class Capability(_message.Message):
    __slots__ = ("name", "unavailable_reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    unavailable_reason: str
    def __init__(self, name: _Optional[str] = ..., unavailable_reason: _Optional[str] = ...) -> None: ...

class AgentReport(_message.Message):
    __slots__ = ("seq", "wall_time", "memory", "compile", "compile_events", "programs", "steps", "agent", "devices", "platform", "compile_functions", "stall", "process", "capabilities", "goodput")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FIELD_NUMBER: _ClassVar[int]
    COMPILE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    COMPILE_FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    STALL_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    wall_time: float
    memory: _containers.RepeatedCompositeFieldContainer[DeviceMemorySample]
    compile: CompileCounters
    compile_events: _containers.RepeatedCompositeFieldContainer[CompileEvent]
    programs: _containers.RepeatedCompositeFieldContainer[ProgramInfo]
    steps: StepCounters
    agent: AgentCounters
    devices: _containers.RepeatedCompositeFieldContainer[DeviceInfo]
    platform: str
    compile_functions: _containers.RepeatedCompositeFieldContainer[FunctionCompiles]
    stall: StallReport
    process: ProcessIdentity
    capabilities: _containers.RepeatedCompositeFieldContainer[Capability]
    goodput: GoodputAccount
    def __init__(self, seq: _Optional[int] = ..., wall_time: _Optional[float] = ..., memory: _Optional[_Iterable[_Union[DeviceMemorySample, _Mapping]]] = ..., compile: _Optional[_Union[CompileCounters, _Mapping]] = ..., compile_events: _Optional[_Iterable[_Union[CompileEvent, _Mapping]]] = ..., programs: _Optional[_Iterable[_Union[ProgramInfo, _Mapping]]] = ..., steps: _Optional[_Union[StepCounters, _Mapping]] = ..., agent: _Optional[_Union[AgentCounters, _Mapping]] = ..., devices: _Optional[_Iterable[_Union[DeviceInfo, _Mapping]]] = ..., platform: _Optional[str] = ..., compile_functions: _Optional[_Iterable[_Union[FunctionCompiles, _Mapping]]] = ..., stall: _Optional[_Union[StallReport, _Mapping]] = ..., process: _Optional[_Union[ProcessIdentity, _Mapping]] = ..., capabilities: _Optional[_Iterable[_Union[Capability, _Mapping]]] = ..., goodput: _Optional[_Union[GoodputAccount, _Mapping]] = ...) -> None: ...

class GoodputAccount(_message.Message):
    __slots__ = ("process_started_at", "as_of", "seconds", "steps_marked", "first_step_at", "last_step_at")
    class SecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PROCESS_STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_MARKED_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_AT_FIELD_NUMBER: _ClassVar[int]
    process_started_at: float
    as_of: float
    seconds: _containers.ScalarMap[str, float]
    steps_marked: bool
    first_step_at: float
    last_step_at: float
    def __init__(self, process_started_at: _Optional[float] = ..., as_of: _Optional[float] = ..., seconds: _Optional[_Mapping[str, float]] = ..., steps_marked: _Optional[bool] = ..., first_step_at: _Optional[float] = ..., last_step_at: _Optional[float] = ...) -> None: ...

class CommandResult(_message.Message):
    __slots__ = ("command_id", "ok", "message", "paths", "error_code", "hlo_gzip", "traced_seconds")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    HLO_GZIP_FIELD_NUMBER: _ClassVar[int]
    TRACED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    command_id: int
    ok: bool
    message: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    error_code: str
    hlo_gzip: bytes
    traced_seconds: float
    def __init__(self, command_id: _Optional[int] = ..., ok: _Optional[bool] = ..., message: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ..., error_code: _Optional[str] = ..., hlo_gzip: _Optional[bytes] = ..., traced_seconds: _Optional[float] = ...) -> None: ...

class MessagePart(_message.Message):
    __slots__ = ("index", "last", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    last: bool
    data: bytes
    def __init__(self, index: _Optional[int] = ..., last: _Optional[bool] = ..., data: _Optional[bytes] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("hello", "report", "result", "execution_sample", "oom", "part", "shown")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    OOM_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    SHOWN_FIELD_NUMBER: _ClassVar[int]
    hello: AgentHello
    report: AgentReport
    result: CommandResult
    execution_sample: ExecutionSample
    oom: OomReport
    part: MessagePart
    shown: ProcessShown
    def __init__(self, hello: _Optional[_Union[AgentHello, _Mapping]] = ..., report: _Optional[_Union[AgentReport, _Mapping]] = ..., result: _Optional[_Union[CommandResult, _Mapping]] = ..., execution_sample: _Optional[_Union[ExecutionSample, _Mapping]] = ..., oom: _Optional[_Union[OomReport, _Mapping]] = ..., part: _Optional[_Union[MessagePart, _Mapping]] = ..., shown: _Optional[_Union[ProcessShown, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("protocol_version", "daemon_version", "period_seconds", "max_part_bytes")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_PART_BYTES_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    daemon_version: str
    period_seconds: float
    max_part_bytes: int
    def __init__(self, protocol_version: _Optional[int] = ..., daemon_version: _Optional[str] = ..., period_seconds: _Optional[float] = ..., max_part_bytes: _Optional[int] = ...) -> None: ...

class StartTrace(_message.Message):
    __slots__ = ("duration_ms", "log_dir", "annotation_json")
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    ANNOTATION_JSON_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    log_dir: str
    annotation_json: str
    def __init__(self, duration_ms: _Optional[int] = ..., log_dir: _Optional[str] = ..., annotation_json: _Optional[str] = ...) -> None: ...

class SaveMemoryProfile(_message.Message):
    __slots__ = ("path", "annotation_json")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ANNOTATION_JSON_FIELD_NUMBER: _ClassVar[int]
    path: str
    annotation_json: str
    def __init__(self, path: _Optional[str] = ..., annotation_json: _Optional[str] = ...) -> None: ...

class GetHlo(_message.Message):
    __slots__ = ("fingerprint",)
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    def __init__(self, fingerprint: _Optional[str] = ...) -> None: ...

class SampleLength(_message.Message):
    __slots__ = ("seconds", "max_seconds")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    max_seconds: float
    def __init__(self, seconds: _Optional[float] = ..., max_seconds: _Optional[float] = ...) -> None: ...

class DaemonCommand(_message.Message):
    __slots__ = ("command_id", "start_trace", "save_memory_profile", "get_hlo", "sample_length")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    START_TRACE_FIELD_NUMBER: _ClassVar[int]
    SAVE_MEMORY_PROFILE_FIELD_NUMBER: _ClassVar[int]
    GET_HLO_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    command_id: int
    start_trace: StartTrace
    save_memory_profile: SaveMemoryProfile
    get_hlo: GetHlo
    sample_length: SampleLength
    def __init__(self, command_id: _Optional[int] = ..., start_trace: _Optional[_Union[StartTrace, _Mapping]] = ..., save_memory_profile: _Optional[_Union[SaveMemoryProfile, _Mapping]] = ..., get_hlo: _Optional[_Union[GetHlo, _Mapping]] = ..., sample_length: _Optional[_Union[SampleLength, _Mapping]] = ...) -> None: ...

class DaemonMessage(_message.Message):
    __slots__ = ("welcome", "command", "prove")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    PROVE_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    command: DaemonCommand
    prove: ProveProcess
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., command: _Optional[_Union[DaemonCommand, _Mapping]] = ..., prove: _Optional[_Union[ProveProcess, _Mapping]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("protocol_version", "changes_only")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANGES_ONLY_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    changes_only: bool
    def __init__(self, protocol_version: _Optional[int] = ..., changes_only: _Optional[bool] = ...) -> None: ...

class SnapshotMessage(_message.Message):
    __slots__ = ("schema_version", "json")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    json: bytes
    def __init__(self, schema_version: _Optional[int] = ..., json: _Optional[bytes] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ("protocol_version", "fresh")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    fresh: bool
    def __init__(self, protocol_version: _Optional[int] = ..., fresh: _Optional[bool] = ...) -> None: ...

class CaptureRequest(_message.Message):
    __slots__ = ("protocol_version", "job_name", "pid", "duration_ms", "log_dir", "memory_profile")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PROFILE_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_name: str
    pid: int
    duration_ms: int
    log_dir: str
    memory_profile: bool
    def __init__(self, protocol_version: _Optional[int] = ..., job_name: _Optional[str] = ..., pid: _Optional[int] = ..., duration_ms: _Optional[int] = ..., log_dir: _Optional[str] = ..., memory_profile: _Optional[bool] = ...) -> None: ...

class CaptureReply(_message.Message):
    __slots__ = ("job_name", "pid", "kind", "log_dir", "run_dir", "paths", "message", "seconds")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    pid: int
    kind: str
    log_dir: str
    run_dir: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    message: str
    seconds: float
    def __init__(self, job_name: _Optional[str] = ..., pid: _Optional[int] = ..., kind: _Optional[str] = ..., log_dir: _Optional[str] = ..., run_dir: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ..., message: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class GetHloRequest(_message.Message):
    __slots__ = ("protocol_version", "job_name", "pid", "fingerprint")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_name: str
    pid: int
    fingerprint: str
    def __init__(self, protocol_version: _Optional[int] = ..., job_name: _Optional[str] = ..., pid: _Optional[int] = ..., fingerprint: _Optional[str] = ...) -> None: ...

class GetHloReply(_message.Message):
    __slots__ = ("job_name", "pid", "fingerprint", "program_name", "hlo_gzip")
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_NAME_FIELD_NUMBER: _ClassVar[int]
    HLO_GZIP_FIELD_NUMBER: _ClassVar[int]
    job_name: str
    pid: int
    fingerprint: str
    program_name: str
    hlo_gzip: bytes
    def __init__(self, job_name: _Optional[str] = ..., pid: _Optional[int] = ..., fingerprint: _Optional[str] = ..., program_name: _Optional[str] = ..., hlo_gzip: _Optional[bytes] = ...) -> None: ...
