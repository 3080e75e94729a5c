"""What xmon reads of an HLO module, whichever form it was read from.

An optimized HLO module comes as a serialized ``HloModuleProto`` (:mod:`xmon.hlo.proto`, what
the agent reads: its fields are XLA's own) or as text (:mod:`xmon.hlo.text`, what users paste
and tests write by hand). Both give the same graph: computations of instructions, each
instruction with the few facts loop costing needs (what it calls, a while's trip count
annotation, a compare's direction, a tuple index, a parameter number, an integer constant, a
custom-call's target). Loop costing (:mod:`xmon.execution.loop_cost`) and trip counting
(:mod:`xmon.execution.trip_count`) work on this graph only.

GEMM custom-calls, which XLA's cost analysis counts as 0, are counted here for either form
(2 × output elements × the lhs contracting sizes; see :mod:`xmon.hlo.text` for the derivation).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

# Call targets from XLA's xla/service/gpu/cublas_cudnn.cc (kGemmCallTarget,
# kCublasLtMatmulCallTarget, kCublasLtMatmulF8CallTarget, kCublasLtMatmulMxCallTarget) and the
# grouped (ragged) GEMM of newer XLA. ROCm builds reuse these names for hipBLAS(Lt).
GEMM_CALL_TARGETS = frozenset(
    {
        "__cublas$gemm",
        "__cublas$lt$matmul",
        "__cublas$lt$matmul$f8",
        "__cublas$lt$matmul$mx",
        "__cublas$lt$groupedMatmul",
    }
)

# Instructions that name the computation of their async-start, which runs it once: for cost
# they call nothing, for reachability they name it.
ASYNC_FOLLOWERS = frozenset({"async-done", "async-update"})


class Instruction(Protocol):
    """One instruction, as loop costing sees it."""

    @property
    def name(self) -> str: ...

    @property
    def opcode(self) -> str: ...

    @property
    def is_root(self) -> bool: ...

    @property
    def operand_names(self) -> tuple[str, ...]: ...

    def called(self) -> tuple[list[str], bool]:
        """Computations it runs, and whether only one of them runs (a conditional)."""
        ...

    def named_computations(self) -> list[str]:
        """Every computation it names, an async-done's included (for reachability)."""
        ...

    def called_as(self, role: str) -> str | None:
        """The computation it calls as ``role``: "body" or "condition" of a while, "calls" of
        a fusion."""
        ...

    @property
    def trip_annotation(self) -> str | None:
        """The digits of XLA's ``known_trip_count`` on a while, or None."""
        ...

    @property
    def direction(self) -> str | None:
        """A compare's direction ("LT", ...), or None."""
        ...

    @property
    def tuple_index(self) -> int | None:
        """A get-tuple-element's index, or None."""
        ...

    @property
    def parameter_number(self) -> int | None:
        """A parameter's number, or None."""
        ...

    @property
    def integer_constant(self) -> int | None:
        """A scalar integer constant's value, or None (floats, arrays, anything else)."""
        ...

    @property
    def custom_call_target(self) -> str | None: ...


InstructionT = TypeVar("InstructionT", bound=Instruction)


@dataclass
class Computation(Generic[InstructionT]):
    """One computation: its instructions, and (for text) its lines to rebuild a module from."""

    name: str
    is_entry: bool
    instructions: list[InstructionT] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # text only: header, instructions and "}"

    def root(self) -> InstructionT | None:
        """The ROOT instruction; without one (hand-written text), the last instruction."""
        roots = [i for i in self.instructions if i.is_root]
        return roots[-1] if roots else (self.instructions[-1] if self.instructions else None)

    def instruction(self, name: str) -> InstructionT | None:
        return next((i for i in self.instructions if i.name == name), None)


@dataclass(frozen=True)
class GemmCall:
    """One GEMM custom-call instruction of the module (not weighted by call sites)."""

    name: str
    computation: str
    target: str
    flops: float | None  # None: dynamic shapes or unreadable dot_dimension_numbers


@dataclass(frozen=True)
class GemmTotals:
    flops: float = 0.0
    count: int = 0

    def __add__(self, other: GemmTotals) -> GemmTotals:
        return GemmTotals(self.flops + other.flops, self.count + other.count)


def gemm_flops(
    out: Sequence[int | None] | None,
    lhs: Sequence[int | None] | None,
    contracting: Sequence[int] | None,
    ragged: Sequence[int] = (),
    batch: Sequence[int] = (),
) -> float | None:
    """2 × output elements × lhs contracting sizes; None where a size is dynamic or unknown,
    or a grouped GEMM's groups split K or the batch (the output shape alone does not tell)."""
    if out is None or lhs is None or contracting is None:
        return None
    if any(d < 0 or d >= len(lhs) for d in contracting):
        return None
    if set(ragged) & (set(contracting) | set(batch)):
        return None
    sizes = [*out, *(lhs[d] for d in contracting)]
    if any(size is None for size in sizes):
        return None
    return 2.0 * math.prod(size for size in sizes if size is not None)


class ModuleGraph(ABC, Generic[InstructionT]):
    """One module: computations by name, the call graph, GEMM custom-call totals."""

    def __init__(self, computations: dict[str, Computation[InstructionT]]) -> None:
        self.computations = computations
        self._memo: dict[str, GemmTotals] = {}
        self._active: set[str] = set()

    @abstractmethod
    def flops_of(
        self, computation: Computation[InstructionT], instruction: InstructionT
    ) -> float | None:
        """FLOPs of one GEMM custom-call, or None where its shapes cannot be read."""

    @abstractmethod
    def with_entry(self, name: str) -> str | bytes | None:
        """This module cut down to computation ``name`` (its ENTRY) and what it calls, in the
        module's own form (text, or a serialized HloModuleProto), for XLA's cost analysis."""

    def gemm_calls(self) -> Iterator[tuple[Computation[InstructionT], InstructionT, str]]:
        for computation in self.computations.values():
            for instruction in computation.instructions:
                target = instruction.custom_call_target
                if instruction.opcode == "custom-call" and target in GEMM_CALL_TARGETS:
                    yield computation, instruction, target or ""

    def custom_call_targets(self) -> set[str]:
        return {
            i.custom_call_target or ""
            for c in self.computations.values()
            for i in c.instructions
            if i.opcode == "custom-call"
        }

    def roots(self) -> list[str]:
        """ENTRY computations; in a fragment without one, every computation nothing calls."""
        entries = [name for name, c in self.computations.items() if c.is_entry]
        if entries:
            return entries
        called = {
            name
            for c in self.computations.values()
            for i in c.instructions
            for name in i.called()[0]
        }
        return [name for name in self.computations if name not in called]

    def reachable(self, name: str) -> list[str]:
        """``name`` and every computation it calls, directly or not, in the module's order."""
        seen, todo = {name}, [name]
        while todo:
            computation = self.computations.get(todo.pop())
            for instruction in computation.instructions if computation else ():
                for callee in instruction.named_computations():
                    if callee not in seen:
                        seen.add(callee)
                        todo.append(callee)
        return [n for n in self.computations if n in seen]

    def gemm_flops(self, name: str) -> float:
        """GEMM custom-call FLOPs of one run of computation ``name`` (loop bodies once)."""
        return self.totals(name).flops

    def totals(self, name: str) -> GemmTotals:
        computation = self.computations.get(name)
        if computation is None or name in self._active:
            return GemmTotals()  # unknown callee, or a cycle in a malformed module
        if name not in self._memo:
            self._active.add(name)
            self._memo[name] = self._sum(computation)
            self._active.discard(name)
        return self._memo[name]

    def _sum(self, computation: Computation[InstructionT]) -> GemmTotals:
        total = GemmTotals()
        for instruction in computation.instructions:
            if instruction.opcode == "custom-call" and (
                instruction.custom_call_target in GEMM_CALL_TARGETS
            ):
                total += GemmTotals(self.flops_of(computation, instruction) or 0.0, 1)
            names, one_of = instruction.called()
            callee_totals = [self.totals(n) for n in names]
            if one_of and callee_totals:
                total += max(callee_totals, key=lambda t: (t.flops, t.count))
            else:
                total = sum(callee_totals, total)
        return total
