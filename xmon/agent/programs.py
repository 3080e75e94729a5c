"""Cost and memory analysis of one compiled executable (``jaxlib LoadedExecutable``).

Two passes. :func:`describe_executable` runs in the compile hook, on the user's compiling
thread, and reads only what XLA has at hand (cost and memory analysis, fingerprint): its figures
count every while-loop body once, so the record says ``flops_lower_bound=True`` until the second
pass. :func:`analyse_loops` and :func:`with_loop_cost` run on the agent's thread with the
optimized HLO module protos: every loop body counted once per trip
(``xmon.execution.loop_cost``), and the GEMM custom-calls GPU XLA's cost analysis counts as 0
added.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from xmon.agent import internals
from xmon.execution.loop_cost import LoopCost, XlaCost, loop_cost_of_protos
from xmon.model import Program

# Backends whose XLA lowers dots to library custom-calls that cost analysis does not count.
_CUSTOM_CALL_GEMM_PLATFORMS = frozenset({"gpu", "cuda", "rocm"})


def module_name(computation: Any) -> str:
    """HLO module name (``jit_f``) from the MLIR module's ``sym_name`` attribute."""
    try:
        return internals.mlir_module_name(computation)
    except Exception:  # noqa: BLE001 - not an MLIR module, or this jax keeps it elsewhere
        return "unknown"


def normalise_cost_analysis(raw: Any) -> dict[str, float]:
    """jax <= 0.4.37 returned a one-element list; newer returns a dict; both may be None."""
    if isinstance(raw, list | tuple):
        raw = raw[0] if raw else None
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}


def _optional_float(costs: dict[str, float], key: str) -> float | None:
    value = costs.get(key)
    return None if value is None or value < 0 else value


def _flops(costs: dict[str, float]) -> float | None:
    """XLA's FLOPs; 0 where its cost analysis ran but has no "flops" key: it leaves the key
    out of a program that only moves data (a transpose, a copy, a concatenation). Unknown
    (None) only where there is no cost analysis at all."""
    if costs and "flops" not in costs:
        return 0.0
    return _optional_float(costs, "flops")


def _memory_fields(stats: Any) -> dict[str, int | None]:
    def read(attribute: str) -> int | None:
        value = getattr(stats, attribute, None)
        return int(value) if isinstance(value, int) and value >= 0 else None

    return {
        "argument_bytes": read("argument_size_in_bytes"),
        "output_bytes": read("output_size_in_bytes"),
        "alias_bytes": read("alias_size_in_bytes"),
        "temp_bytes": read("temp_size_in_bytes"),
        "generated_code_bytes": read("generated_code_size_in_bytes"),
        "peak_memory_bytes": read("peak_memory_in_bytes"),
    }


def _fingerprint(executable: Any, name: str) -> str:
    raw = getattr(executable, "fingerprint", None)
    if isinstance(raw, bytes) and raw:
        return raw.decode("ascii", "replace")
    if isinstance(raw, str) and raw:
        return raw
    # No fingerprint from this backend: hash the optimized HLO so the key is still stable.
    try:
        text = executable.hlo_modules()[0].to_string()
    except Exception:  # noqa: BLE001
        text = f"{name}:{id(executable)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _platform(executable: Any) -> str:
    try:
        return str(executable.client.platform).lower()
    except Exception:  # noqa: BLE001
        return ""


def _num_devices(executable: Any) -> int:
    try:
        return max(1, len(executable.local_devices()))
    except Exception:  # noqa: BLE001
        return 1


def describe_executable(computation: Any, executable: Any) -> Program:
    """Read cost analysis, memory analysis and identity of a freshly compiled executable.

    Cost numbers are per device (XLA's convention for SPMD programs). Nothing here renders the
    HLO text (that is O(module size), and this runs on the user's compiling thread): the figures
    are XLA's, marked a lower bound until :func:`with_loop_cost` replaces them.
    """
    name = module_name(computation)
    costs = normalise_cost_analysis(executable.cost_analysis())
    memory: dict[str, Any]  # keyword arguments of Program (mypy cannot match str keys)
    try:
        memory = _memory_fields(executable.get_compiled_memory_stats())
    except Exception:  # noqa: BLE001 - backends without memory analysis
        memory = {}
    flops_xla = _flops(costs)
    bytes_xla = _optional_float(costs, "bytes accessed")
    # GEMM custom-calls exist only where XLA lowers dots to cuBLAS: elsewhere there are none.
    gemm = None if _platform(executable) in _CUSTOM_CALL_GEMM_PLATFORMS else 0.0
    return Program(
        fingerprint=_fingerprint(executable, name),
        name=name,
        flops=flops_xla,
        flops_xla=flops_xla,
        custom_call_flops=gemm,
        transcendentals=_optional_float(costs, "transcendentals"),
        bytes_accessed=bytes_xla,
        bytes_accessed_xla=bytes_xla,
        flops_lower_bound=True,  # loops not counted yet: see with_loop_cost
        num_devices=_num_devices(executable),
        compiled_at=time.time(),
        **memory,
    )


def xla_cost_function(executable: Any) -> XlaCost | None:
    """XLA's cost analysis of an HLO module (a serialized proto, or text) on the executable's
    own client, or None where this jaxlib lacks it (xmon.agent.internals): then loop bodies
    cannot be costed alone."""
    try:
        analyse = internals.hlo_cost_analysis()
        client = executable.client
    except Exception:  # noqa: BLE001 - private API: absent means "cannot"
        return None

    def cost(module: str | bytes) -> Mapping[str, float] | None:
        result = analyse(client, module)
        return result if isinstance(result, dict) else None

    return cost


def analyse_loops(executable: Any, modules: Sequence[bytes]) -> LoopCost:
    """Loop-aware cost of the executable whose optimized HLO modules are ``modules``
    (serialized ``HloModuleProto`` s; agent thread)."""
    return loop_cost_of_protos(modules, xla_cost_function(executable))


def with_loop_cost(program: Program, cost: LoopCost) -> Program:
    """``program`` as :func:`describe_executable` made it, with loop-aware figures: XLA's own
    stay in ``flops_xla`` and ``bytes_accessed_xla``. Apply once per record (transcendentals
    have no field for XLA's figure)."""
    extra = cost.extra
    gemm = program.custom_call_flops if cost.custom_call_flops is None else cost.custom_call_flops

    def plus(value: float | None, added: float | None) -> float | None:
        return None if value is None else value + (added or 0.0)

    return dataclasses.replace(
        program,
        flops=plus(plus(program.flops_xla, extra.flops if extra else 0.0), gemm),
        custom_call_flops=gemm,
        transcendentals=plus(program.transcendentals, extra.transcendentals if extra else None),
        bytes_accessed=plus(program.bytes_accessed_xla, extra.bytes_accessed if extra else None),
        flops_lower_bound=cost.lower_bound,
        flops_upper_bound=cost.upper_bound,
        loops=len(cost.loops),
        loops_unknown_trip_count=cost.unknown_trip_counts,
        conditionals=cost.conditionals,
    )
