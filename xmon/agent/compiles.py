"""Compile activity of the job: jax.monitoring events plus every compiled executable.

Two sources, joined on the compiling thread:

* public ``jax.monitoring`` listeners give compile-phase durations (with ``fun_name`` since
  jax 0.6.1) and persistent-cache requests/hits/misses;
* a pass-through wrapper around jax's ``compile_or_get_cached`` (xmon.agent.internals) sees every
  executable XLA builds or loads from the persistent cache (jit, pjit, pmap, eager primitives),
  so cost and memory analysis are recorded for every program without any change to user code.
  It is private API, but the only place that hands out the executable; its name and
  module-attribute call site have been stable from jax 0.4.30 to 0.11 (see
  docs/architecture.md). When it is missing the agent still reports compile events.

Listeners run synchronously inside the user's jit call and an exception there would propagate
into user code, so every callback here is wrapped and does O(1) work.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from xmon.agent import internals
from xmon.agent.explanations import CacheMissExplanations
from xmon.agent.programs import analyse_loops, describe_executable, with_loop_cost
from xmon.agent.signatures import describe_compile
from xmon.analysis.compiles import FunctionRow, FunctionTable
from xmon.model import CompileEvent, CompileStats, Program

log = logging.getLogger("xmon.agent")

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"
CACHE_REQUESTS = "/jax/compilation_cache/compile_requests_use_cache"
CACHE_HITS = "/jax/compilation_cache/cache_hits"
CACHE_MISSES = "/jax/compilation_cache/cache_misses"

MAX_PENDING_EVENTS = 1024
MAX_PROGRAMS = 4096
MAX_PROGRAM_IDS = 16  # module ids kept per program (the newest): recompiles add ids
# Fields the loop analysis sets; a recompile of a known fingerprint (same HLO) keeps them.
_LOOP_COST_FIELDS = (
    "flops",
    "custom_call_flops",
    "transcendentals",
    "bytes_accessed",
    "flops_lower_bound",
    "flops_upper_bound",
    "loops",
    "loops_unknown_trip_count",
    "conditionals",
)


def persistent_cache_on() -> bool:
    """Whether jax has a persistent compilation cache to consult. jax (0.10) counts
    ``compile_requests_use_cache`` even with no cache directory set, so without this check a
    job with the cache off showed requests with neither hits nor misses."""
    try:
        import jax

        enabled = getattr(jax.config, "jax_enable_compilation_cache", True)
        return bool(enabled and getattr(jax.config, "jax_compilation_cache_dir", None))
    except Exception:  # noqa: BLE001 - an unknown jax: count as jax does
        return True


class CompileRecorder:
    """Thread-safe accumulator of compile counters, recent events and program records."""

    def __init__(
        self,
        in_step: Callable[[], bool] = lambda: False,
        steps: Callable[[], tuple[int, bool]] = lambda: (0, False),
    ) -> None:
        self._lock = threading.Lock()
        self._in_step = in_step
        self._steps = steps  # (marked steps finished, whether the job marks steps)
        self._functions = FunctionTable()  # per-function compiles: the recompile finding
        self._counts: dict[str, float] = {}
        self._seen_fun_names: set[str] = set()
        self._pending_events: deque[CompileEvent] = deque(maxlen=MAX_PENDING_EVENTS)
        self._programs: dict[str, Program] = {}
        self._unsent: list[str] = []
        self._cost_pending: set[str] = set()  # records with XLA's figures, loops not counted yet
        self._local = threading.local()
        self.events_dropped = 0
        self.explanations = CacheMissExplanations()  # jax's, with jax_explain_cache_misses
        self.generation = 0  # bumps on every compile; lets the step API notice new programs
        # Receives (fingerprint, executable) of every program, e.g. the agent's HLO store.
        self.executable_listener: Callable[[str, Any], None] | None = None

    # -- jax.monitoring callbacks (user threads) --------------------------------------------
    def on_event(self, event: str, **kwargs: Any) -> None:
        try:
            if event == CACHE_HITS:
                self._local.cache_hit = True
            if event == CACHE_REQUESTS and not persistent_cache_on():
                return
            if event in (CACHE_REQUESTS, CACHE_HITS, CACHE_MISSES):
                with self._lock:
                    self._counts[event] = self._counts.get(event, 0) + 1
        except Exception:  # noqa: BLE001 - never raise into the user's jit call
            pass

    def on_duration(self, event: str, duration_secs: float, **kwargs: Any) -> None:
        try:
            if event == BACKEND_COMPILE:
                self._on_backend_compile(str(kwargs.get("fun_name", "?")), float(duration_secs))
            elif event in (TRACE, LOWERING):
                with self._lock:
                    self._counts[event] = self._counts.get(event, 0.0) + float(duration_secs)
        except Exception:  # noqa: BLE001
            pass

    def _on_backend_compile(self, fun_name: str, seconds: float) -> None:
        cache_hit = bool(getattr(self._local, "cache_hit", False))
        self._local.cache_hit = False
        last = getattr(self._local, "last_program", None)
        self._local.last_program = None
        with self._lock:
            self._counts["compiles"] = self._counts.get("compiles", 0) + 1
            self._counts[BACKEND_COMPILE] = self._counts.get(BACKEND_COMPILE, 0.0) + seconds
            if fun_name in self._seen_fun_names:
                self._counts["recompiles"] = self._counts.get("recompiles", 0) + 1
            self._seen_fun_names.add(fun_name)
            if len(self._pending_events) == self._pending_events.maxlen:
                self.events_dropped += 1
            self._pending_events.append(CompileEvent(fun_name, seconds, time.time(), cache_hit))
            if last is not None and last in self._programs:
                self._programs[last] = dataclasses.replace(
                    self._programs[last],
                    fun_name=fun_name,
                    compile_seconds=seconds,
                    cache_hit=cache_hit,
                )
                self._mark_unsent(last)

    # -- executable hook (user threads) ------------------------------------------------------
    def on_executable(self, computation: Any, executable: Any) -> None:
        try:
            record = describe_executable(computation, executable)
        except Exception as exc:  # noqa: BLE001
            log.debug("xmon: could not analyse a compiled program: %s", exc)
            return
        in_step = self._in_step()
        listener = self.executable_listener
        arguments, eager = _describe_compile()
        steps_before, marked = self._steps()
        explanation = self.explanations.take(record.name)
        with self._lock:
            self.generation += 1
            self._functions.record(
                record.name, arguments, record.fingerprint, eager, time.time(), steps_before, marked
            )
            self._functions.explain(record.name, explanation)
            existing = self._programs.get(record.fingerprint)
            ids: tuple[int, ...] = ()
            if existing is not None:
                in_step = in_step or existing.in_step
                ids = existing.program_ids  # this executable's ids follow from the agent thread
                # same fingerprint, same HLO: the loop-aware cost (or its pending state) stands
                record = dataclasses.replace(
                    record, **{name: getattr(existing, name) for name in _LOOP_COST_FIELDS}
                )
            elif len(self._programs) >= MAX_PROGRAMS:
                self.events_dropped += 1
                return
            elif listener is not None:
                self._cost_pending.add(record.fingerprint)
            else:  # nobody will read the HLO: XLA's figures are all there will be
                record = dataclasses.replace(record, flops_lower_bound=False)
            self._programs[record.fingerprint] = dataclasses.replace(
                record, in_step=in_step, program_ids=ids
            )
            self._mark_unsent(record.fingerprint)
        self._local.last_program = record.fingerprint
        if listener is not None:
            try:
                listener(record.fingerprint, executable)
            except Exception:  # noqa: BLE001 - never break the user's compile
                pass

    # -- module ids (agent thread, see HloStore) ---------------------------------------------
    def add_program_ids(self, fingerprint: str, ids: tuple[int, ...]) -> None:
        """Record the HLO module ids of one of the program's executables; a change is sent."""
        with self._lock:
            program = self._programs.get(fingerprint)
            if program is None:
                return
            known = program.program_ids
            merged = known + tuple(i for i in dict.fromkeys(ids) if i not in known)
            if merged == known:
                return
            self._programs[fingerprint] = dataclasses.replace(
                program, program_ids=merged[-MAX_PROGRAM_IDS:]
            )
            self._mark_unsent(fingerprint)

    # -- loop-aware cost (agent thread, see HloStore) ----------------------------------------
    def add_loop_cost(self, fingerprint: str, executable: Any, modules: list[bytes] | None) -> None:
        """Replace XLA's body-once figures with loop-aware ones from the program's optimized
        HLO ``modules`` (serialized protos); the change is sent. ``modules`` None: the HLO could
        not be read (dropped from the store's queue, or the backend has none), so XLA's figures
        are all there is."""
        with self._lock:
            if fingerprint not in self._cost_pending:
                return  # costed already (a recompile), or never recorded
        cost = analyse_loops(executable, modules) if modules is not None else None
        with self._lock:
            program = self._programs.get(fingerprint)
            if program is None or fingerprint not in self._cost_pending:
                return
            self._cost_pending.discard(fingerprint)
            if cost is not None:
                program = with_loop_cost(program, cost)
            else:  # loops unknown; GEMMs uncounted where the backend has them
                unknown_gemms = program.custom_call_flops is None
                program = dataclasses.replace(program, flops_lower_bound=unknown_gemms)
            self._programs[fingerprint] = program
            self._mark_unsent(fingerprint)

    def _mark_unsent(self, fingerprint: str) -> None:
        if fingerprint not in self._unsent:
            self._unsent.append(fingerprint)

    # -- reporting (agent thread) --------------------------------------------------------------
    def stats(self) -> CompileStats:
        with self._lock:
            c = dict(self._counts)
        return CompileStats(
            compiles_total=int(c.get("compiles", 0)),
            recompiles_total=int(c.get("recompiles", 0)),
            backend_compile_seconds_total=c.get(BACKEND_COMPILE, 0.0),
            trace_seconds_total=c.get(TRACE, 0.0),
            lowering_seconds_total=c.get(LOWERING, 0.0),
            cache_requests_total=int(c.get(CACHE_REQUESTS, 0)),
            cache_hits_total=int(c.get(CACHE_HITS, 0)),
            cache_misses_total=int(c.get(CACHE_MISSES, 0)),
            steady_recompiles_total=self._functions.steady_recompiles_total,
            eager_compiles_total=self._functions.eager_compiles_total,
        )

    def recompiled_functions(self) -> list[FunctionRow]:
        """The functions compiled more than once, as copies (for the report)."""
        with self._lock:
            return [
                dataclasses.replace(r, changes=r.changes.copy())
                for r in self._functions.recompiled()
            ]

    def take_events(self) -> list[CompileEvent]:
        with self._lock:
            events = list(self._pending_events)
            self._pending_events.clear()
        return events

    def unsent_programs(self) -> list[Program]:
        """Programs the daemon has not acknowledged; call mark_sent() once delivered."""
        with self._lock:
            return [self._programs[f] for f in self._unsent if f in self._programs]

    def mark_sent(self, programs: list[Program]) -> None:
        """Delivered: a program changed since it was taken for the report (its module ids came
        in meanwhile) stays unsent, so the change goes out with the next report."""
        with self._lock:
            sent = {p.fingerprint for p in programs if self._programs.get(p.fingerprint) is p}
            self._unsent = [f for f in self._unsent if f not in sent]

    def resend_all(self) -> None:
        """After a reconnect the daemon may be a new process: send the whole catalogue."""
        with self._lock:
            self._unsent = list(self._programs)

    def programs(self) -> list[Program]:
        with self._lock:
            return list(self._programs.values())

    def program_by_name(self, name: str) -> Program | None:
        with self._lock:
            matches = [p for p in self._programs.values() if p.name == name]
        return max(matches, key=lambda p: p.compiled_at or 0.0) if matches else None


def _describe_compile() -> tuple[tuple[str, ...], bool]:
    try:
        return describe_compile()
    except Exception:  # noqa: BLE001 - a jax whose stack we cannot read: arguments unknown
        return (), False


class CompileHooks:
    """Installs and removes the listeners and the executable hook for one recorder."""

    def __init__(self, recorder: CompileRecorder, *duration_listeners: Callable[..., None]) -> None:
        """``duration_listeners``: more jax.monitoring duration listeners, installed and
        removed with the recorder's (the wall-time account's, xmon.agent.goodput)."""
        self._recorder = recorder
        self._duration_listeners = (recorder.on_duration, *duration_listeners)
        self._original: Callable[..., Any] | None = None
        self._wrapper: Callable[..., Any] | None = None
        self._compiler: Any = None  # the module whose compile function is wrapped
        self.executable_hook_installed = False
        self.error_listener: Callable[[BaseException], None] | None = None  # a failed compile

    def install(self) -> None:
        import jax.monitoring as monitoring

        monitoring.register_event_listener(self._recorder.on_event)
        for listener in self._duration_listeners:
            monitoring.register_event_duration_secs_listener(listener)
        self._recorder.explanations.install()
        self._install_executable_hook()

    def _install_executable_hook(self) -> None:
        try:
            compiler = internals.compiler_module()
        except internals.Unavailable:
            return  # the capability says so (xmon.agent.capabilities)
        original = getattr(compiler, internals.COMPILE_FUNCTION)
        recorder, hooks = self._recorder, self

        def compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
            try:
                executable = original(*args, **kwargs)
            except BaseException as exc:
                if hooks.error_listener is not None:
                    hooks.error_listener(exc)  # never raises (xmon.agent.oom)
                raise
            computation = args[1] if len(args) > 1 else kwargs.get("computation")
            recorder.on_executable(computation, executable)
            return executable

        compile_or_get_cached.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(compiler, internals.COMPILE_FUNCTION, compile_or_get_cached)
        self._compiler = compiler
        self._original, self._wrapper = original, compile_or_get_cached
        self.executable_hook_installed = True

    def uninstall(self) -> None:
        import jax.monitoring as monitoring

        self._recorder.explanations.uninstall()
        for name, callback in (
            ("unregister_event_listener", self._recorder.on_event),
            *(("unregister_event_duration_listener", d) for d in self._duration_listeners),
        ):
            unregister = getattr(monitoring, name, None)
            try:
                if unregister is not None:
                    unregister(callback)
            except Exception:  # noqa: BLE001 - already gone
                pass
        compiler = self._compiler
        if self._original is not None and compiler is not None:
            # Only restore if nobody wrapped it after us; otherwise leave the chain intact.
            if getattr(compiler, internals.COMPILE_FUNCTION, None) is self._wrapper:
                setattr(compiler, internals.COMPILE_FUNCTION, self._original)
        self.executable_hook_installed = False
