"""The agent's one seam to private jax, jaxlib and CPython details.

jax has no public hook for several things the agent needs: a profiler session that hands back
the serialized XSpace without writing files, and the profiler's own lock so a sample never
collides with the user's ``jax.profiler.start_trace``; a callback for every compiled executable;
whether a backend exists yet (asking ``jax.devices()`` would create one); the lowering's abstract
arguments; the cost analysis of one HLO module; the coordinator of ``jax.distributed``. Every
such access is here and nowhere else, so a jax release that moves one breaks one function of
this module, not the agent.

Each function either returns what it reads or raises :class:`Unavailable` with a reason a user
can act on. :func:`probe` runs at attach and says, per capability of the agent, whether this jax
and Python give it (``CAPABILITIES``); the agent reports that state with every report, and turns
a capability unavailable when its access fails at run time, so nothing that stops working does
so silently (``xmon_agent_capability_available``, the ``capability_unavailable`` finding).

Checked on jax 0.10 (Python 3.11) to 0.12 (Python 3.12, 3.13).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

# What each capability of the agent is for, shown with its state (docs/metrics.md).
CAPABILITIES: Mapping[str, str] = {
    "ledger": "execution samples: executions per program, FLOPs per step, HFU, busy ratio",
    "catalogue": "every compiled program with its cost and memory analysis",
    "loop_cost": "loop-aware FLOPs (each loop body costed times its trip count)",
    "recompile_cause": "which argument changed when a function recompiled",
    "stall_stacks": "every thread's stack while the job is stalled",
    "memory_readings": "device memory where PJRT has no allocator stats (CPU)",
    "job_identity": "the job key of a multi-process jax.distributed job",
}

_JAX_RANGE = "jax 0.10 to 0.12"


class Unavailable(Exception):
    """A private detail this jax or Python does not have; ``str()`` is the reason."""


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - ImportError, or an import that raises inside
        raise Unavailable(f"{name} cannot be imported ({type(exc).__name__})") from exc


def _attribute(owner: Any, name: str, where: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError:
        raise Unavailable(f"{where}.{name} not found") from None


# -- the profiler -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfilerState:
    """jax's profiler lock and its running session (``jax._src.profiler._profile_state``)."""

    owner: Any

    @property
    def lock(self) -> threading.Lock:
        return self.owner.lock  # type: ignore[no-any-return]

    def session_running(self) -> bool:
        # jax <= 0.11 calls the running session ``profile_session``; 0.12 ``session``.
        for name in ("session", "profile_session"):
            if hasattr(self.owner, name):
                return getattr(self.owner, name) is not None
        raise Unavailable("jax._src.profiler._profile_state has no session attribute")

    def reset(self) -> None:
        self.owner.reset()


def profiler_state() -> ProfilerState:
    profiler = _module("jax._src.profiler")
    state = ProfilerState(_attribute(profiler, "_profile_state", "jax._src.profiler"))
    lock = _attribute(state.owner, "lock", "jax._src.profiler._profile_state")
    if not (callable(getattr(lock, "acquire", None)) and callable(getattr(lock, "release", None))):
        raise Unavailable("jax._src.profiler._profile_state.lock is not a lock")
    state.session_running()  # raises where neither name exists
    return state


def _raw_profiler() -> Any:
    return _module("jax._src.lib")._profiler


def start_raw_session(options: Any) -> Any:
    """A jaxlib ``ProfilerSession``: its ``stop()`` returns the serialized XSpace, in memory.
    jax's public ``ProfileSession`` (0.12) returns parsed ``ProfileData`` instead, and cannot be
    held under the lock while it records."""
    return _attribute(_raw_profiler(), "ProfilerSession", "jaxlib._profiler")(options)


def profile_options() -> Any:
    return _attribute(_raw_profiler(), "ProfileOptions", "jaxlib._profiler")()


def _probe_ledger() -> None:
    profiler_state()
    raw = _raw_profiler()
    session_class = _attribute(raw, "ProfilerSession", "jaxlib._profiler")
    _attribute(session_class, "stop", "jaxlib._profiler.ProfilerSession")
    profile_options()


# -- compiles ---------------------------------------------------------------------------------

COMPILE_MODULE = "jax._src.compiler"
COMPILE_FUNCTION = "compile_or_get_cached"


def compiler_module() -> ModuleType:
    """The module whose ``compile_or_get_cached`` every jit, pmap and AOT compile goes through:
    the agent wraps it to see each executable (jax.monitoring gives durations, not programs)."""
    module = _module(COMPILE_MODULE)
    if not callable(getattr(module, COMPILE_FUNCTION, None)):
        raise Unavailable(f"{COMPILE_MODULE}.{COMPILE_FUNCTION} not found")
    return module


def backends_initialized() -> bool:
    """Whether the user's code has created a backend (the agent never creates one: doing so at
    attach would lock TPU chips early and break ``jax.distributed.initialize()``)."""
    bridge = _module("jax._src.xla_bridge")
    return bool(_attribute(bridge, "backends_are_initialized", "jax._src.xla_bridge")())


def mlir_module_name(computation: Any) -> str:
    """The HLO module name (``jit_f``) of a lowered MLIR module: its ``sym_name``."""
    ir = _attribute(_module("jax._src.lib.mlir"), "ir", "jax._src.lib.mlir")
    return str(ir.StringAttr(computation.operation.attributes["sym_name"]).value)


# Where jaxlib keeps its HLO text parser and its module proto reader: jaxlib._hlo since 0.9,
# xla_client._xla before. Each place is a module and a chain of attributes.
_TEXT_PARSERS = (
    ("jaxlib._hlo", "hlo_module_from_text"),
    ("jax._src.lib", "_xla", "hlo_module_from_text"),
)
_PROTO_READERS = (
    ("jaxlib._hlo", "HloModule", "from_serialized_hlo_module_proto"),
    ("jax._src.lib", "_xla", "HloModule", "from_serialized_hlo_module_proto"),
)


def _first_callable(places: tuple[tuple[str, ...], ...], what: str) -> Callable[..., Any]:
    """The first of ``places`` this jaxlib has, or Unavailable naming ``what``."""
    for module, *chain in places:
        try:
            found: Any = importlib.import_module(module)
            for attribute in chain:
                found = getattr(found, attribute)
        except Exception:  # noqa: BLE001 - try the next place
            continue
        if callable(found):
            return found  # type: ignore[no-any-return]
    first = places[0]
    raise Unavailable(f"no {what} ({first[0]}.{'.'.join(first[1:])}) in this jaxlib")


def _text_parser() -> Callable[[str], Any]:
    return _first_callable(_TEXT_PARSERS, "HLO text parser")


def _proto_reader() -> Callable[[bytes], Any]:
    return _first_callable(_PROTO_READERS, "HLO module proto reader")


def hlo_cost_analysis() -> Callable[[Any, str | bytes], Any]:
    """``analyse(client, module)``: XLA's cost analysis of one HLO module (a serialized
    HloModuleProto, or text) on a client, so a loop body can be costed on its own."""
    xla_client = _attribute(_module("jax._src.lib"), "xla_client", "jax._src.lib")
    xla = _attribute(xla_client, "_xla", "jax._src.lib.xla_client")
    analyse = _attribute(xla, "hlo_module_cost_analysis", "xla_client._xla")
    read_proto = _proto_reader()
    if not callable(analyse):
        raise Unavailable("xla_client._xla.hlo_module_cost_analysis is not callable")

    def cost(client: Any, module: str | bytes) -> Any:
        if isinstance(module, str):  # hand-written HLO: parsed only when asked for
            return analyse(client, _text_parser()(module))
        return analyse(client, read_proto(module))

    return cost


def hlo_module_from_text(text: str) -> Any:
    """jaxlib's HloModule parsed from HLO text (XLA's own parser)."""
    return _text_parser()(text)


def hlo_module_from_proto(serialized: bytes) -> Any:
    """jaxlib's HloModule read from a serialized HloModuleProto."""
    return _proto_reader()(serialized)


# -- why a function recompiled ----------------------------------------------------------------

# The frame that holds a lowering's abstract arguments and their shardings: jax hands them to
# ``pxla.UnloadedMeshExecutable.from_hlo``, two frames above compile_or_get_cached.
ARGUMENTS_FRAME = "from_hlo"
ARGUMENT_LOCALS = ("global_in_avals", "in_shardings")
# The logger jax's ``jax_explain_cache_misses`` writes to (its ``explain`` function).
EXPLAIN_LOGGER = "jax._src.interpreters.partial_eval"


def lowering_arguments(frame: FrameType) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(abstract values, shardings) in a ``from_hlo`` frame."""
    local_vars = frame.f_locals
    return tuple(local_vars.get("global_in_avals") or ()), tuple(
        local_vars.get("in_shardings") or ()
    )


def _probe_recompile_cause() -> None:
    pxla = _module("jax._src.interpreters.pxla")
    executable = _attribute(pxla, "UnloadedMeshExecutable", "jax._src.interpreters.pxla")
    from_hlo = _attribute(executable, ARGUMENTS_FRAME, "pxla.UnloadedMeshExecutable")
    try:
        parameters = inspect.signature(from_hlo).parameters
    except (TypeError, ValueError) as exc:
        raise Unavailable("pxla.UnloadedMeshExecutable.from_hlo has no signature") from exc
    missing = [name for name in ARGUMENT_LOCALS if name not in parameters]
    if missing:
        raise Unavailable(f"pxla.UnloadedMeshExecutable.from_hlo takes no {', '.join(missing)}")


# -- other threads' stacks --------------------------------------------------------------------


def thread_frames() -> dict[int, FrameType]:
    """Every thread's innermost frame (CPython's ``sys._current_frames``): read from the agent's
    thread, with no signal sent to the job."""
    frames = getattr(sys, "_current_frames", None)
    if frames is None:
        raise Unavailable(f"{sys.implementation.name} has no sys._current_frames")
    return frames()  # type: ignore[no-any-return]


def _probe_memory_readings() -> None:
    backends_initialized()
    thread_frames()


# -- jax.distributed --------------------------------------------------------------------------


def distributed_coordinator() -> tuple[str, int] | None:
    """(coordinator address, number of processes) once ``jax.distributed`` is initialised."""
    state = _attribute(_module("jax._src.distributed"), "global_state", "jax._src.distributed")
    address = getattr(state, "coordinator_address", None)
    count = getattr(state, "num_processes", None)
    if not address or not isinstance(count, int) or getattr(state, "client", None) is None:
        return None
    return str(address), count


# -- the probe --------------------------------------------------------------------------------

_PROBES: Mapping[str, Callable[[], object]] = {
    "ledger": _probe_ledger,
    "catalogue": lambda: (compiler_module(), _attribute(_module("jax._src.lib.mlir"), "ir", "")),
    "loop_cost": hlo_cost_analysis,
    "recompile_cause": _probe_recompile_cause,
    "stall_stacks": thread_frames,
    "memory_readings": _probe_memory_readings,
    "job_identity": distributed_coordinator,
}


def probe() -> dict[str, str]:
    """Each capability and why it is unavailable ("" where it is available). Cheap: imports
    that jax has already done and attribute reads; no backend is created."""
    return {name: _reason(check) for name, check in _PROBES.items()}


def _reason(check: Callable[[], object]) -> str:
    try:
        check()
    except Unavailable as exc:
        return f"{exc} (supported: {_JAX_RANGE})"
    except Exception as exc:  # noqa: BLE001 - a probe must never fail attach
        return f"{type(exc).__name__}: {exc}"[:200]
    return ""
