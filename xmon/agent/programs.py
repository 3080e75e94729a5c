"""Cost and memory analysis of one compiled executable (``jaxlib LoadedExecutable``)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from xmon.model import Program

# Backends whose XLA lowers dots to library custom-calls that cost analysis does not count.
_CUSTOM_CALL_GEMM_PLATFORMS = frozenset({"gpu", "cuda", "rocm"})


def module_name(computation: Any) -> str:
    """HLO module name (``jit_f``) from the MLIR module's ``sym_name`` attribute."""
    try:
        from jax._src.lib.mlir import ir

        return str(ir.StringAttr(computation.operation.attributes["sym_name"]).value)
    except Exception:  # noqa: BLE001
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


def _custom_call_flops(executable: Any) -> float | None:
    from xmon import hlo

    try:
        text = "\n".join(m.to_string() for m in executable.hlo_modules())
    except Exception:  # noqa: BLE001
        return None
    return hlo.custom_call_gemm_flops(text)


def describe_executable(computation: Any, executable: Any) -> Program:
    """Read cost analysis, memory analysis and identity of a freshly compiled executable.

    Cost numbers are per device (XLA's convention for SPMD programs). ``flops`` adds GEMMs that
    GPU XLA lowered to cuBLAS custom-calls, which its cost analysis reports as ~0 FLOPs.
    """
    name = module_name(computation)
    costs = normalise_cost_analysis(executable.cost_analysis())
    memory: dict[str, Any]  # keyword arguments of Program (mypy cannot match str keys)
    try:
        memory = _memory_fields(executable.get_compiled_memory_stats())
    except Exception:  # noqa: BLE001 - backends without memory analysis
        memory = {}
    flops_xla = _optional_float(costs, "flops")
    extra = (
        _custom_call_flops(executable)
        if _platform(executable) in _CUSTOM_CALL_GEMM_PLATFORMS
        else 0.0
    )
    flops = None if flops_xla is None else flops_xla + (extra or 0.0)
    return Program(
        fingerprint=_fingerprint(executable, name),
        name=name,
        flops=flops,
        flops_xla=flops_xla,
        custom_call_flops=extra,
        transcendentals=_optional_float(costs, "transcendentals"),
        bytes_accessed=_optional_float(costs, "bytes accessed"),
        num_devices=_num_devices(executable),
        compiled_at=time.time(),
        **memory,
    )
