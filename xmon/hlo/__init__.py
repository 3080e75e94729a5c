"""Optimized HLO modules, read without jax: their computations, loops and GEMM custom-calls.

:mod:`xmon.hlo.proto` reads the serialized ``HloModuleProto`` the agent gets from each
executable; :mod:`xmon.hlo.text` reads HLO text; both give the graph of :mod:`xmon.hlo.graph`.
The text functions below are kept at this level for readers of ``compiled.as_text()``.
"""

from xmon.hlo.graph import GEMM_CALL_TARGETS, Computation, GemmCall
from xmon.hlo.text import (
    Instruction,
    Module,
    callees,
    custom_call_gemm_flops,
    find_gemm_custom_calls,
    gemm_custom_call_count,
    gemm_target,
    parse_instruction,
    parse_modules,
)

__all__ = [
    "GEMM_CALL_TARGETS",
    "Computation",
    "GemmCall",
    "Instruction",
    "Module",
    "callees",
    "custom_call_gemm_flops",
    "find_gemm_custom_calls",
    "gemm_custom_call_count",
    "gemm_target",
    "parse_instruction",
    "parse_modules",
]
