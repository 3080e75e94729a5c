"""The in-job agent: samples, records and reports from one background thread."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xmon import __version__
from xmon.agent import internals, memory
from xmon.agent.capabilities import Capabilities
from xmon.agent.commands import CommandRunner
from xmon.agent.compiles import CompileHooks, CompileRecorder
from xmon.agent.goodput import GoodputWatch, process_start_wall
from xmon.agent.hlo_store import HloStore
from xmon.agent.identity import ProcessIdentity, identify
from xmon.agent.live_memory import LiveMemory
from xmon.agent.oom import OomWatch
from xmon.agent.proof import can_prove
from xmon.agent.redact import redact_argv
from xmon.agent.sampler import ExecutionSampler, LedgerConfig
from xmon.agent.stall import StallWatch
from xmon.agent.steps import StepAnnotationHook, StepTimer, tracing_probe
from xmon.agent.transport import Outgoing, Transport
from xmon.analysis.compiles import FunctionRow
from xmon.model import Program
from xmon.wire import paths
from xmon.wire.proto import xmon_pb2
from xmon.wire.protocol import fields_of, optional_field_names

log = logging.getLogger("xmon.agent")

MAX_ARG_CHARS = 1024  # each argument in the hello (32 at most): it must fit one message


def default_job_name(argv: list[str], env: Mapping[str, str]) -> str:
    if env.get("XMON_JOB_NAME"):
        return env["XMON_JOB_NAME"]
    for arg in argv:
        base = os.path.basename(arg)
        if base and not base.startswith("-") and base not in ("python", "python3", "-m", "-c"):
            return base.removesuffix(".py") or "python"
    return "python"


class Agent:
    def __init__(
        self,
        job_name: str | None = None,
        period: float = 1.0,
        socket_path: Path | None = None,
        step_annotations: bool = True,
        env: Mapping[str, str] | None = None,
        ledger: LedgerConfig | None = None,
        job_key: str | None = None,
    ) -> None:
        env = os.environ if env is None else env
        if not 0.01 <= period <= 3600:
            raise ValueError(f"xmon.attach: period must be between 0.01 and 3600 s, got {period}")
        self.job_name = job_name or default_job_name(sys.argv, env)
        self.period = period
        self.socket_path = socket_path or paths.default_socket_path(env)
        self._env = env  # read again for each hello (XMON_SEND_SECRETS)
        self.started_at = time.time()
        self.capabilities = Capabilities(internals.probe())
        self.steps = StepTimer()
        self.steps.tracing = tracing_probe()  # outermost steps annotate a profiler trace
        self.live_memory = LiveMemory(self.steps)  # the CPU fallback for bytes in use
        self.declared_tokens_per_step: float | None = None  # xmon.declare_model_flops
        self.compiles = CompileRecorder(
            in_step=self.steps.in_step, steps=lambda: (self.steps.steps_total, self.steps.marked)
        )
        self.stall = StallWatch(self.steps)
        self.goodput = GoodputWatch(
            self.steps, process_start_wall(), ran_jax_before=memory.backends_ready()
        )
        self._hooks = CompileHooks(self.compiles, self.goodput.on_duration)
        self._annotations = StepAnnotationHook(self.steps) if step_annotations else None
        self.hlo = HloStore()
        self.compiles.executable_listener = self.hlo.offer
        self.hlo.ids_listener = self.compiles.add_program_ids
        self.hlo.cost_listener = self.compiles.add_loop_cost
        self._commands = CommandRunner(self._send_result, self.hlo)
        self.oom = OomWatch(self.compiles.programs, _program_proto, self._send_oom)
        self.steps.exception_listener = lambda exc: self.oom.seen(exc, "step")
        self._hooks.error_listener = lambda exc: self.oom.seen(exc, "compile")
        self.transport = Transport(
            paths.grpc_target(self.socket_path), self._hello, self._commands.submit
        )
        self.sampler = ExecutionSampler(
            ledger or LedgerConfig.from_env(env),
            self._send_sample,
            self._sampling_wanted,
            step_begins=lambda: self.steps.begin_times,
            capabilities=self.capabilities,
        )
        self._commands.sample_length_listener = self.sampler.ask_length
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._devices: list[Any] = []
        self._device_infos: list[xmon_pb2.DeviceInfo] = []
        self._devices_announced = False  # the daemon on the current stream knows our devices
        self._declared_job_key = job_key
        self._identity: xmon_pb2.ProcessIdentity | None = None  # once the backend is up
        self.overhead_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._hooks.install()
        self.oom.install()
        if self._annotations is not None:
            self._annotations.install()
        self.transport.start()
        self._thread = threading.Thread(target=self._loop, name="xmon-agent", daemon=True)
        self._thread.start()
        self.sampler.start()

    def stop(self, flush_timeout: float = 1.0) -> None:
        self._stop.set()
        self.sampler.stop()
        if self._thread is not None:
            self._thread.join(self.period + 1.0)
        if self.transport.connected:
            self._report_once()  # the last steps and compiles of the job
            self.transport.flush(flush_timeout)
        self.transport.stop()
        self._commands.stop()
        self.oom.uninstall()
        if self._annotations is not None:
            self._annotations.uninstall()
        self._hooks.uninstall()

    def forget_in_child(self) -> None:
        """In a forked child: undo the hooks in the job's Python (the compile hook, listeners,
        excepthooks, step annotations) and touch no thread, socket or gRPC object: they are the
        parent's. Never raises."""
        for undo in (self.oom.uninstall, self._hooks.uninstall,
                     self._annotations.uninstall if self._annotations else None):  # fmt: skip
            try:
                if undo is not None:
                    undo()
            except Exception:  # noqa: BLE001 - the child's own work comes first
                pass

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._report_once()

    def _report_once(self) -> None:
        started = time.perf_counter()
        try:
            # Render new programs' HLO text (and count their loops) off the user's threads, and
            # before the report, so a program is not first sent with XLA's body-once figures.
            self.hlo.drain()
            self._refresh_devices()
            if self.transport.connected:
                message, programs = self.build_report()
                self.transport.offer(Outgoing(message, self._on_sent(message, programs)))
            else:  # nobody to send to: count the report without paying to build it
                self.transport.counters.add("reports_dropped")
        except Exception as exc:  # noqa: BLE001 - never let the agent thread die
            log.debug("xmon: report failed: %r", exc)
        self.overhead_seconds += time.perf_counter() - started

    def _on_sent(
        self, message: xmon_pb2.AgentMessage, programs: list[Program]
    ) -> Callable[[], None]:
        announces_devices = bool(message.report.devices)

        def on_sent() -> None:
            self.compiles.mark_sent(programs)
            if announces_devices:
                self._devices_announced = True

        return on_sent

    # -- building messages -------------------------------------------------------------------
    def _refresh_devices(self) -> None:
        if self._devices or not memory.backends_ready():
            return
        self._devices = memory.local_devices()
        self._device_infos = [_device_proto(memory.device_info(d)) for d in self._devices]
        # jax.distributed is initialised before the backend (jax refuses the other order), so
        # what the process learns now is final for its life.
        try:
            self._identity = _identity_proto(
                identify(
                    self.job_name,
                    self._devices,
                    self._env,
                    self._declared_job_key,
                    self._coordinator(),
                    _process_index(),
                    _process_count(),
                )
            )
        except Exception as exc:  # noqa: BLE001 - the job's other numbers still go out
            log.debug("xmon: process identity unknown: %r", exc)

    def _coordinator(self) -> tuple[str, int] | None:
        try:
            return internals.distributed_coordinator()
        except internals.Unavailable as exc:
            self.capabilities.lost("job_identity", str(exc))
            return None

    def _hello(self) -> xmon_pb2.AgentMessage:
        import jax
        import jaxlib

        self.compiles.resend_all()  # a (re)connected daemon may know nothing of us
        self._devices_announced = bool(self._device_infos)
        hello = xmon_pb2.AgentHello(
            protocol_version=xmon_pb2.PROTOCOL_VERSION,
            job_name=self.job_name,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            platform=self._platform(),
            jax_version=jax.__version__,
            jaxlib_version=getattr(jaxlib, "__version__", ""),
            process_index=_process_index() if self._devices else 0,
            process_count=_process_count() if self._devices else 1,
            # The hello goes whole, before the daemon says how large a message may be.
            argv=[arg[:MAX_ARG_CHARS] for arg in redact_argv(sys.argv[:32], self._env)],
            started_at=self.started_at,
            devices=self._device_infos,
            agent_version=__version__,
            proves_process=can_prove(),
        )
        return xmon_pb2.AgentMessage(hello=hello)

    def _platform(self) -> str:
        return self._devices[0].platform if self._devices else ""

    def build_report(self) -> tuple[xmon_pb2.AgentMessage, list[Program]]:
        self._seq += 1
        programs = self.compiles.unsent_programs()
        stats = self.compiles.stats()
        report = xmon_pb2.AgentReport(
            seq=self._seq,
            wall_time=time.time(),
            memory=self._memory_samples(),
            compile=xmon_pb2.CompileCounters(**fields_of(stats, xmon_pb2.CompileCounters)),
            compile_events=[
                xmon_pb2.CompileEvent(**fields_of(e, xmon_pb2.CompileEvent))
                for e in self.compiles.take_events()
            ],
            programs=[_program_proto(p) for p in programs],
            steps=self._step_counters(),
            agent=self._agent_counters(),
            devices=[] if self._devices_announced else self._device_infos,
            platform=self._platform(),
            compile_functions=[_function_proto(f) for f in self.compiles.recompiled_functions()],
            stall=self._stall_report(),
            goodput=self.goodput.report(),
            process=self._identity,
            capabilities=[
                xmon_pb2.Capability(name=name, unavailable_reason=reason)
                for name, reason in self.capabilities.states()
            ],
        )
        return xmon_pb2.AgentMessage(report=report), programs

    def _stall_report(self) -> xmon_pb2.StallReport | None:
        """The stall with every thread's stack; without stacks where this Python cannot read
        other threads' frames (the report still goes)."""
        try:
            return self.stall.report()
        except internals.Unavailable as exc:
            self.capabilities.lost("stall_stacks", str(exc))
            return None

    def _memory_samples(self) -> list[xmon_pb2.DeviceMemorySample]:
        if not self._devices:
            return []
        samples = []
        fallback: dict[int, int] | None = None
        for device in self._devices:
            stats = memory.memory_stats(device)
            sample = xmon_pb2.DeviceMemorySample(device_id=int(device.id), stats=stats or {})
            if stats is None:
                if fallback is None:
                    fallback = self._live_bytes()
                if int(device.id) in fallback:  # no reading at rest yet: unknown, not 0
                    sample.live_array_bytes = fallback[int(device.id)]
                    if self.live_memory.last_wall is not None:
                        sample.live_array_read_at = self.live_memory.last_wall
            samples.append(sample)
        return samples

    def _live_bytes(self) -> dict[int, int]:
        """The CPU fallback, read at rest (waiting a little for a step to end)."""
        started = time.perf_counter()
        reading = self.live_memory.read([int(d.id) for d in self._devices], self.period / 4)
        waited = time.perf_counter() - started - self.live_memory.last_cost
        self.overhead_seconds -= max(0.0, waited)  # waiting for the job is not our time
        return reading or {}

    def _step_counters(self) -> xmon_pb2.StepCounters:
        steps_total, step_seconds_total = self.steps.totals()
        counters = xmon_pb2.StepCounters(
            steps_total=steps_total,
            step_seconds_total=step_seconds_total,
            recent_step_seconds=self.steps.take_recent(),
            steps_begun_total=self.steps.steps_begun,
        )
        open_for = self.steps.open_step_seconds()
        if open_for is not None:
            counters.open_step_seconds = open_for
        if self.steps.declared_flops_per_step is not None:
            counters.flops_per_step = self.steps.declared_flops_per_step
        if self.steps.declared_bytes_per_step is not None:
            counters.bytes_per_step = self.steps.declared_bytes_per_step
        if self.declared_tokens_per_step is not None:
            counters.tokens_per_step = self.declared_tokens_per_step
        return counters

    def _agent_counters(self) -> xmon_pb2.AgentCounters:
        c = self.transport.counters
        return xmon_pb2.AgentCounters(
            reports_sent_total=c.reports_sent,
            reports_dropped_total=c.reports_dropped,
            events_dropped_total=self.compiles.events_dropped,
            reconnects_total=c.reconnects,
            overhead_seconds_total=self.overhead_seconds + self.sampler.busy_seconds,
            ledger_samples_total=self.sampler.samples_total,
            ledger_samples_skipped_total=self.sampler.skipped_total,
            ledger_samples_busy_total=self.sampler.busy_total,
            ledger_next_sample_at=self.sampler.next_sample_at,
        )

    def _send_result(self, result: xmon_pb2.CommandResult) -> None:
        self.transport.offer(Outgoing(xmon_pb2.AgentMessage(result=result)))

    def _send_sample(self, sample: xmon_pb2.ExecutionSample) -> bool:
        return self.transport.offer(Outgoing(xmon_pb2.AgentMessage(execution_sample=sample)))

    def _send_oom(self, report: xmon_pb2.OomReport) -> bool:
        return self.transport.offer(Outgoing(xmon_pb2.AgentMessage(oom=report)))

    def _sampling_wanted(self) -> bool:
        # Nobody to send to, or no backend yet: profiling would cost the job for nothing.
        return self.transport.connected and bool(self._devices)


def _process_index() -> int:
    import jax

    return int(jax.process_index())


def _process_count() -> int:
    import jax

    return int(jax.process_count())


def _identity_proto(identity: ProcessIdentity) -> xmon_pb2.ProcessIdentity:
    proto = xmon_pb2.ProcessIdentity(
        job_key=identity.job_key,
        job_key_declared=identity.job_key_declared,
        distributed=identity.distributed,
        process_index=identity.process_index,
        process_count=identity.process_count,
        worker=identity.worker,
    )
    if identity.slice_index is not None:
        proto.slice_index = identity.slice_index
    return proto


def _device_proto(info: Any) -> xmon_pb2.DeviceInfo:
    proto = xmon_pb2.DeviceInfo(
        id=info.id,
        platform=info.platform,
        device_kind=info.device_kind,
        process_index=info.process_index,
        coords=list(info.coords or ()),
    )
    _copy_known(info, proto, ("local_hardware_id", "core_on_chip", "slice_index"))
    return proto


def _copy_known(source: Any, proto: Any, names: tuple[str, ...]) -> None:
    """Set the proto's optional fields that are known (None stays unset: "not available")."""
    for name in names:
        value = getattr(source, name)
        if value is not None:
            setattr(proto, name, value)


_PROGRAM_OPTIONAL = optional_field_names(xmon_pb2.ProgramInfo)


def _function_proto(row: FunctionRow) -> xmon_pb2.FunctionCompiles:
    return xmon_pb2.FunctionCompiles(**fields_of(row, xmon_pb2.FunctionCompiles))


def _program_proto(record: Program) -> xmon_pb2.ProgramInfo:
    proto = xmon_pb2.ProgramInfo(
        fingerprint=record.fingerprint,
        name=record.name,
        fun_name=record.fun_name or "",
        num_devices=record.num_devices,
        compiled_at=record.compiled_at or 0.0,
        cache_hit=record.cache_hit,
        in_step=record.in_step,
        program_ids=record.program_ids,
        flops_lower_bound=record.flops_lower_bound,
        flops_upper_bound=record.flops_upper_bound,
        loops=record.loops,
        loops_unknown_trip_count=record.loops_unknown_trip_count,
        conditionals=[
            xmon_pb2.ConditionalCost(
                name=c.name,
                branches=[
                    xmon_pb2.BranchCost(flops=b.flops, bytes_accessed=b.bytes_accessed, ops=b.ops)
                    for b in c.branches
                ],
                counted_flops=c.counted_flops,
                counted_bytes_accessed=c.counted_bytes_accessed,
            )
            for c in record.conditionals
        ],
    )
    _copy_known(record, proto, _PROGRAM_OPTIONAL)
    return proto
