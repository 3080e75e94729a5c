"""Loop-aware cost of a compiled program, from its optimized HLO module.

XLA's ``Compiled.cost_analysis()`` (HloCostAnalysis::HandleWhile) counts a while loop's body and
condition once, whatever the trip count: a matmul inside a 40-trip ``lax.scan`` is reported as
1/40 of what runs. Here every while loop is found (nested ones, and loops inside called
computations and conditional branches), its trip count read, and the cost rebuilt from XLA's own
cost of single computations, each run as the entry of a module of its own:

    F(c) = X(c) + sum over the loops w that c runs:  n_w * F(body_w) - X(body_w)
                                                   + (n_w + 1) * F(cond_w) - X(cond_w)

where X is XLA's cost (bodies once) and F the loop-aware one, recursively for nested loops. A
conditional adds max_b F(b) - max_b X(b) per figure (XLA takes the costliest branch, per figure);
any other call adds F(callee) - X(callee). A conditional whose branches do different work makes
the figures an upper bound (``LoopCost.upper_bound``): they count its costliest branch, whichever
one a run takes. Only computations that (transitively) run a loop are
costed, so a program without loops costs no XLA call at all.

The module is read from its ``HloModuleProto`` (:func:`loop_cost_of_protos`, what the agent
does: XLA's own fields, not a printed format) or from its text (:func:`loop_cost`, for HLO that
only comes as text); both give the same graph (:mod:`xmon.hlo.graph`) and the same figures.

Trip counts come from XLA's ``known_trip_count`` backend_config annotation, else from a
condition comparing a simple induction variable (get-tuple-element of the loop state) with a
constant, with the initial value from the while's operand tuple and the step from the body's
root tuple. A loop whose trip count is neither has its body counted once (as XLA does) and makes
the result a lower bound.

GEMM custom-calls, which XLA's cost analysis counts as 0 (see ``xmon.hlo``), are weighed the same
way. Nothing here imports jax: XLA's cost comes in as a callable, and a malformed module never
raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from xmon.execution.trip_count import annotated_trips, trip_count
from xmon.hlo.graph import GEMM_CALL_TARGETS, Computation, Instruction, ModuleGraph
from xmon.hlo.proto import read_module, scan_module
from xmon.hlo.text import KNOWN_TRIP_COUNT, parse_modules
from xmon.model import Branch, Conditional

# XLA's cost of the module given (text, or a serialized HloModuleProto; its ENTRY is the
# computation wanted): the dict of HloCostAnalysis ("flops", "transcendentals",
# "bytes accessed", ...), or None if unknown.
XlaCost = Callable[[str | bytes], Mapping[str, float] | None]
Module = ModuleGraph[Any]

# Each XLA call reparses the computation and what it calls; past this many, the program's cost
# is left at XLA's figure and marked a lower bound rather than stall the agent's thread.
DEFAULT_MAX_XLA_CALLS = 64


@dataclass(frozen=True)
class Cost:
    """Cost figures of one run: XLA's three, and the GEMM custom-call FLOPs XLA leaves out."""

    flops: float = 0.0
    transcendentals: float = 0.0
    bytes_accessed: float = 0.0
    gemm_flops: float = 0.0

    def combine(self, other: Cost, op: Callable[[float, float], float]) -> Cost:
        values = [op(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)]
        return Cost(*values)

    def __add__(self, other: Cost) -> Cost:
        return self.combine(other, lambda a, b: a + b)

    def __sub__(self, other: Cost) -> Cost:
        return self.combine(other, lambda a, b: a - b)

    def scaled(self, factor: float) -> Cost:
        return self.combine(self, lambda a, _: a * factor)

    def maximum(self, other: Cost) -> Cost:
        return self.combine(other, max)


@dataclass(frozen=True)
class Loop:
    """One while instruction of the program."""

    name: str
    computation: str  # the computation holding the while instruction
    body: str
    condition: str
    trip_count: int | None  # None: unknown (the body is counted once)
    source: str  # "known_trip_count" (XLA's annotation), "condition", or "unknown"


@dataclass(frozen=True)
class LoopCost:
    """What counting every loop body once per trip changes in one program's cost."""

    loops: tuple[Loop, ...] = ()
    # Loop-aware minus XLA's figures (bodies once), summed over the program's modules; None
    # where XLA's cost of a computation could not be had (no API, unparsable text, too large).
    extra: Cost | None = None
    # GEMM custom-call FLOPs of one run, loop-aware; None: not counted (text too large)
    custom_call_flops: float | None = 0.0
    reason: str | None = None  # why ``extra`` is None
    # Targets of custom-calls that may compute but that no cost analysis counts (Pallas and
    # Triton kernels, cuDNN convolutions, LAPACK): their FLOPs are missing from every figure.
    uncosted_custom_calls: tuple[str, ...] = ()
    # Conditionals (lax.cond, lax.switch) whose branches do different work, or whose branches'
    # work could not be compared: XLA counts the costliest branch, so the figures are an upper
    # bound on a run that takes a cheaper one (they are exact where every branch costs the same).
    uneven_conditionals: int = 0
    # Those conditionals with each branch's cost and the ops that mark a run of it, where
    # every one of them could be described (else none: the bound stays)
    conditionals: tuple[Conditional, ...] = ()

    @property
    def upper_bound(self) -> bool:
        """True when the figures may count more than runs: a conditional's costliest branch
        stands for whichever one a run takes."""
        return self.uneven_conditionals > 0

    @property
    def unknown_trip_counts(self) -> int:
        return sum(1 for loop in self.loops if loop.trip_count is None)

    @property
    def lower_bound(self) -> bool:
        """True when the loop-aware figures may still miss work: a trip count is unknown, the
        program has loops and their cost could not be rebuilt, or GEMMs went uncounted."""
        unbuilt = bool(self.loops) and self.extra is None
        uncounted = self.custom_call_flops is None or bool(self.uncosted_custom_calls)
        return self.unknown_trip_counts > 0 or unbuilt or uncounted


# --- cost ----------------------------------------------------------------------------------------


class _Budget(Exception):
    """More XLA calls than allowed: give up on this program."""


class _Costing:
    """F and X of one module's computations, memoized."""

    def __init__(
        self, module: Module, loops: Mapping[str, Loop], xla_cost: XlaCost | None, max_calls: int
    ) -> None:
        self.module = module
        self._loops = loops  # by while instruction name
        self._xla_cost = xla_cost
        self._calls_left = max_calls
        self.xla_ok = xla_cost is not None
        self._loops_in: dict[str, bool] = {}
        self._static: dict[str, Cost] = {}
        self._aware: dict[str, Cost] = {}
        self._active: set[str] = set()

    def has_loops(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name not in self._loops_in:
            computation = self.module.computations.get(name)
            if computation is None or name in seen:
                return False  # unknown, or a cycle in malformed text
            self._loops_in[name] = any(
                i.opcode == "while" or any(self.has_loops(c, seen | {name}) for c in i.called()[0])
                for i in computation.instructions
            )
        return self._loops_in[name]

    def static(self, name: str) -> Cost:
        """X: XLA's cost of ``name`` run once (loop bodies once), with its GEMM custom-calls."""
        if name not in self._static:
            gemm = self.module.gemm_flops(name)
            xla = self._xla(name) if self.xla_ok else None
            if xla is None:
                self.xla_ok = False
            self._static[name] = replace(xla or Cost(), gemm_flops=gemm)
        return self._static[name]

    def _xla(self, name: str) -> Cost | None:
        module = self.module.with_entry(name)
        if module is None or self._xla_cost is None:
            return None
        if self._calls_left <= 0:
            raise _Budget
        self._calls_left -= 1
        try:
            costs = self._xla_cost(module)
            if not costs:
                return None
            # XLA leaves a property out of the dict where nothing has it (0 transcendentals).
            trans = float(costs.get("transcendentals", 0.0))
            return Cost(float(costs["flops"]), trans, float(costs["bytes accessed"]))
        except Exception:  # noqa: BLE001 - the callable wraps private XLA APIs
            return None

    def extra(self, name: str) -> Cost:
        """F - X of ``name``, without X of ``name`` itself (the entry's is XLA's own figure)."""
        if not self.has_loops(name):
            return Cost()
        computation = self.module.computations[name]
        return _sum(self._adjustment(computation, i) for i in computation.instructions)

    def aware(self, name: str) -> Cost:
        """F: the loop-aware cost of ``name`` run once."""
        if not self.has_loops(name) or name in self._active:
            return self.static(name)
        if name not in self._aware:
            self._active.add(name)
            computation = self.module.computations[name]
            total = self.static(name)
            for instruction in computation.instructions:
                total += self._adjustment(computation, instruction)
            self._aware[name] = total
            self._active.discard(name)
        return self._aware[name]

    def _adjustment(self, computation: Computation[Any], instruction: Instruction) -> Cost:
        """What F adds to X for one instruction of ``computation``."""
        if instruction.opcode == "while":
            return self._while(computation, instruction)
        names, one_of = instruction.called()
        names = [n for n in names if n in self.module.computations]
        if not any(self.has_loops(n) for n in names):
            return Cost()
        if one_of:
            aware = [self.aware(n) for n in names]
            static = [self.static(n) for n in names]
            return _maximum(aware) - _maximum(static)
        return _sum(self.aware(n) - self.static(n) for n in names if self.has_loops(n))

    def _while(self, computation: Computation[Any], instruction: Instruction) -> Cost:
        loop = self._loops.get(instruction.name) or _loop(self.module, computation, instruction)
        body, condition, trips = loop.body, loop.condition, loop.trip_count
        if body not in self.module.computations or condition not in self.module.computations:
            return Cost()
        runs = 1 if trips is None else trips  # unknown: the body once, as XLA counts it
        checks = 1 if trips is None else trips + 1  # the condition runs once more than the body
        body_extra = self.aware(body).scaled(runs) - self.static(body)
        return body_extra + self.aware(condition).scaled(checks) - self.static(condition)


def _loop(module: Module, computation: Computation[Any], instruction: Instruction) -> Loop:
    trips, source = trip_count(module, computation, instruction)
    body = instruction.called_as("body") or ""
    condition = instruction.called_as("condition") or ""
    return Loop(instruction.name, computation.name, body, condition, trips, source)


def find_loops(module: Module) -> list[Loop]:
    """Every while loop in the computations the module's entry runs, nested ones included."""
    loops = []
    for name in dict.fromkeys(n for root in module.roots() for n in module.reachable(root)):
        computation = module.computations[name]
        for instruction in computation.instructions:
            if instruction.opcode == "while":
                loops.append(_loop(module, computation, instruction))
    return loops


def _maximum(costs: list[Cost]) -> Cost:
    result = costs[0]
    for cost in costs[1:]:
        result = result.maximum(cost)
    return result


def _sum(costs: Iterable[Cost]) -> Cost:
    total = Cost()
    for cost in costs:
        total += cost
    return total


# --- the program -------------------------------------------------------------------------------

# Reading runs in Python in the job's own process (the agent's thread, holding the GIL). Text is
# parsed at about 10 MB a second (a 26.8 MB module of 1,499 computations took 2.6 s on a 2-core
# machine); a module proto is decoded by protobuf's C code and only its instructions' few fields
# are visited from Python: a 0.9 MB module of 8,151 instructions is read and its 12 loops found
# and weighed in 0.1 s (its 1.0 MB of text took 0.22 s), XLA's calls aside. Larger modules would
# hold the job's Python threads for seconds: they are only scanned for their loops, and a
# program with any is marked a lower bound. Texts without a while loop or a custom-call are not
# parsed at all.
DEFAULT_MAX_TEXT_CHARS = 16 * 1024 * 1024
DEFAULT_MAX_PROTO_BYTES = 16 * 1024 * 1024
_WHILE_LINE = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*[^\n]*?\swhile\((?P<rest>.*)$", re.M
)


def loop_cost_of_protos(
    serialized: Sequence[bytes],
    xla_cost: XlaCost | None,
    max_xla_calls: int = DEFAULT_MAX_XLA_CALLS,
    max_bytes: int = DEFAULT_MAX_PROTO_BYTES,
) -> LoopCost:
    """Loop-aware cost of the program whose modules are ``serialized`` (each an
    ``HloModuleProto``, ``executable.hlo_modules()[k].as_serialized_hlo_module_proto()``).

    ``xla_cost`` gives XLA's cost of a serialized module; without it only the loops and the
    GEMM custom-calls are counted, and a program with loops gets ``extra=None`` (a lower
    bound). Never raises.
    """
    try:
        size = sum(len(module) for module in serialized)
        if size > max_bytes:
            return _scanned([scan_module(module) for module in serialized], size, max_bytes)
        modules = [read_module(module) for module in serialized]
        if any(module is None for module in modules):
            return LoopCost(reason="an HLO module proto could not be read")
        readable = [module for module in modules if module is not None]
        cost = _modules_cost(readable, xla_cost, max_xla_calls)
        targets = set().union(*(module.custom_call_targets() for module in readable))
    except Exception as exc:  # noqa: BLE001 - a monitor must survive any module
        return LoopCost(reason=f"unreadable HLO module ({type(exc).__name__})")
    uncosted = tuple(sorted(targets - _FLOP_FREE_TARGETS - GEMM_CALL_TARGETS))
    return replace(cost, uncosted_custom_calls=uncosted) if uncosted else cost


def _scanned(scans: Sequence[Any], size: int, max_bytes: int) -> LoopCost:
    loops = tuple(
        Loop(name, "", "", "", trips, "known_trip_count" if trips is not None else "unknown")
        for scan in scans
        for name, digits in scan.whiles
        for trips in [annotated_trips(digits) if digits else None]
    )
    targets = frozenset().union(*(scan.custom_call_targets for scan in scans))
    gemm = None if targets & GEMM_CALL_TARGETS else 0.0
    reason = f"HLO modules of {size} bytes, over {max_bytes}"
    uncosted = tuple(sorted(targets - _FLOP_FREE_TARGETS - GEMM_CALL_TARGETS))
    return LoopCost(loops, None if loops else Cost(), gemm, reason, uncosted)


def loop_cost(
    hlo_text: str,
    xla_cost: XlaCost | None,
    max_xla_calls: int = DEFAULT_MAX_XLA_CALLS,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
) -> LoopCost:
    """Loop-aware cost of the program(s) in ``hlo_text`` (``executable.hlo_modules()`` text).

    ``xla_cost`` gives XLA's cost of a module text; without it only the loops and the GEMM
    custom-calls are counted, and a program with loops gets ``extra=None`` (a lower bound).
    Never raises.
    """
    try:
        cost = _loop_cost(hlo_text, xla_cost, max_xla_calls, max_text_chars)
    except Exception as exc:  # noqa: BLE001 - a monitor must survive any text
        return LoopCost(reason=f"unreadable HLO text ({type(exc).__name__})")
    uncosted = uncosted_custom_calls(hlo_text) if isinstance(hlo_text, str) else ()
    return replace(cost, uncosted_custom_calls=uncosted) if uncosted else cost


# Custom-call targets that move, annotate or call back into the host and compute no FLOPs
# worth counting; GEMM targets are counted from their shapes (xmon.hlo).
_FLOP_FREE_TARGETS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement",
    "MoveToHost", "MoveToDevice", "PadToStatic", "SliceToDynamic", "LayoutConstraint",
    "AllocateBuffer", "X64Combine", "X64SplitLow", "X64SplitHigh", "cu_threefry2x32",
    "cu_threefry2x32_ffi", "xla_python_cpu_callback", "xla_python_gpu_callback",
    "xla_ffi_python_cpu_callback", "xla_ffi_python_gpu_callback",
    "xla_ffi_partitioned_python_cpu_callback", "xla_ffi_partitioned_python_gpu_callback",
    "tf.call_tf_function", "InspectSharding", "ResizeBuffer",
})  # fmt: skip
_CUSTOM_CALL_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]*)"')


def uncosted_custom_calls(hlo_text: str) -> tuple[str, ...]:
    """Distinct targets of the custom-calls in ``hlo_text`` whose FLOPs nobody counts: neither
    a GEMM xmon counts nor a call known to compute nothing."""
    if "custom_call_target" not in hlo_text:
        return ()
    targets = {m["target"] for m in _CUSTOM_CALL_TARGET.finditer(hlo_text)}
    return tuple(sorted(targets - _FLOP_FREE_TARGETS - GEMM_CALL_TARGETS))


def _loop_cost(
    hlo_text: str, xla_cost: XlaCost | None, max_xla_calls: int, max_text_chars: int
) -> LoopCost:
    if not isinstance(hlo_text, str):
        return LoopCost(reason="no HLO text")
    if len(hlo_text) > max_text_chars:
        return _too_large(hlo_text, max_text_chars)
    if not any(op in hlo_text for op in (" while(", "custom-call(", " conditional(")):
        return LoopCost(extra=Cost())  # the common case: nothing to parse
    return _modules_cost(parse_modules(hlo_text), xla_cost, max_xla_calls)


def _modules_cost(modules: Sequence[Module], xla_cost: XlaCost | None, max_calls: int) -> LoopCost:
    """Loops, loop-aware extra over XLA's figures and GEMM FLOPs summed over the modules."""
    loops: list[Loop] = []
    extra: Cost | None = Cost()
    gemm = 0.0
    reason: str | None = None
    uneven: list[Conditional | None] = []
    for module in modules:
        found = find_loops(module)
        loops += found
        by_name = {loop.name: loop for loop in found}
        uneven += uneven_conditionals(module, by_name, xla_cost, max_calls)
        try:
            module_extra, module_gemm, ok = _module_cost(module, by_name, xla_cost, max_calls)
        except _Budget:
            module_extra, module_gemm, ok = _module_cost(module, by_name, None, max_calls)
            reason = f"more than {max_calls} computations to cost"
        else:
            if not ok and found:
                reason = reason or "XLA's cost of a loop body could not be read"
        gemm += module_gemm
        if not ok and found:
            extra = None
        elif extra is not None:
            extra += module_extra
    if extra is not None:  # GEMM FLOPs are reported whole, in custom_call_flops
        extra = Cost(extra.flops, extra.transcendentals, extra.bytes_accessed)
    reason = reason if extra is None else None
    described = tuple(c for c in uneven if c is not None)
    if len(described) < len(uneven) or len(described) > MAX_CONDITIONALS:
        described = ()  # a bound on one of them: the samples cannot make the figures exact
    return LoopCost(
        tuple(loops), extra, gemm, reason, uneven_conditionals=len(uneven), conditionals=described
    )


def _module_cost(
    module: Module, loops: Mapping[str, Loop], xla_cost: XlaCost | None, max_calls: int
) -> tuple[Cost, float, bool]:
    """(F - X over the module's entries, loop-aware GEMM FLOPs, whether XLA's cost was read)."""
    costing = _Costing(module, loops, xla_cost if loops else None, max_calls)
    extra, gemm = Cost(), 0.0
    for root in module.roots():
        root_extra = costing.extra(root)
        extra += root_extra
        gemm += module.gemm_flops(root) + root_extra.gemm_flops
    return extra, gemm, costing.xla_ok or not loops


def _conditionals(module: Module) -> list[tuple[str, list[str]]]:
    """Every conditional the module's entries run (nested ones included): its name and its
    branches."""
    found = []
    for name in dict.fromkeys(n for root in module.roots() for n in module.reachable(root)):
        for instruction in module.computations[name].instructions:
            if instruction.opcode == "conditional":
                names, _ = instruction.called()
                found.append((instruction.name, [n for n in names if n in module.computations]))
    return found


MAX_CONDITIONALS = 8  # described per program; past that the bound stays
MAX_BRANCH_OPS = 2  # instructions per branch whose events mark its runs
# Instructions that run no kernel or op of their own: their profiler events (where they have
# any) do not mark a run of their branch.
_NO_OP_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
    "add-dependency", "opt-barrier", "partition-id", "replica-id", "domain",
})  # fmt: skip


def uneven_conditionals(
    module: Module, loops: Mapping[str, Loop], xla_cost: XlaCost | None, max_calls: int
) -> list[Conditional | None]:
    """Conditionals whose branches do different work (FLOPs, transcendentals or GEMM FLOPs,
    each branch loop-aware), or whose branches could not all be costed: of those XLA's figure
    is the costliest branch, whichever one runs. Each with its branches' costs where known
    (None where not)."""
    branches_of = [(c, b) for c, b in _conditionals(module) if len(set(b)) > 1]
    if not branches_of:
        return []
    costing = _Costing(module, loops, xla_cost, max_calls)
    uneven: list[Conditional | None] = []
    for name, branches in branches_of:
        try:
            costs = [costing.aware(branch) for branch in branches]
        except _Budget:
            costs = []
        if costing.xla_ok and costs and _same_work(costs):
            continue
        known = costing.xla_ok and len(costs) == len(branches)
        uneven.append(_described(module, name, branches, costs) if known else None)
    return uneven


def _described(
    module: Module, name: str, branches: Sequence[str], costs: Sequence[Cost]
) -> Conditional:
    """The conditional as the daemon reads its samples for it: each branch's FLOPs as the
    program's figure counts them (XLA's and the GEMM custom-calls, each the costliest
    branch's), and the ops that mark its runs."""
    return Conditional(
        name=name,
        branches=tuple(
            Branch(
                flops=cost.flops + cost.gemm_flops,
                bytes_accessed=cost.bytes_accessed,
                ops=tuple(
                    i.name
                    for i in module.computations[branch].instructions
                    if i.opcode not in _NO_OP_OPCODES
                )[:MAX_BRANCH_OPS],
            )
            for branch, cost in zip(branches, costs, strict=True)
        ),
        counted_flops=max(c.flops for c in costs) + max(c.gemm_flops for c in costs),
        counted_bytes_accessed=max(c.bytes_accessed for c in costs),
    )


def _same_work(costs: list[Cost]) -> bool:
    """Whether every branch does the same work (bytes accessed aside: FLOPs are what a bound
    qualifies), to a part in 10^9."""
    for figure in ("flops", "transcendentals", "gemm_flops"):
        values = [getattr(cost, figure) for cost in costs]
        if max(values) - min(values) > 1e-9 * max(abs(v) for v in values):
            return False
    return True


def _too_large(hlo_text: str, max_text_chars: int) -> LoopCost:
    loops = _scan_loops(hlo_text)
    gemm = None if "__cublas$" in hlo_text else 0.0  # every GEMM call target starts so
    reason = f"HLO text of {len(hlo_text)} characters, over {max_text_chars}"
    return LoopCost(loops, None if loops else Cost(), gemm, reason)


def _scan_loops(hlo_text: str) -> tuple[Loop, ...]:
    """The while loops of text too large to parse, with XLA's trip count annotation only.
    Only the lines holding `` while(`` are matched: the pattern run over every line of 17 MiB
    took 1.3 s of the agent's thread, finding them takes milliseconds."""
    loops = []
    for line in _lines_with(hlo_text, " while("):
        match = _WHILE_LINE.match(line)
        if match is None:
            continue
        known = KNOWN_TRIP_COUNT.search(match["rest"])
        trips = annotated_trips(known[1]) if known else None
        source = "known_trip_count" if trips is not None else "unknown"
        loops.append(Loop(match["name"].lstrip("%"), "", "", "", trips, source))
    return tuple(loops)


def _lines_with(text: str, needle: str) -> Iterator[str]:
    """Each line of ``text`` holding ``needle``, once, found by ``str.find`` (C speed)."""
    at = text.find(needle)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        yield text[start:end]
        at = text.find(needle, end)
