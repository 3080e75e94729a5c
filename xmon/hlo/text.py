"""HLO modules read from their text, and FLOPs of cuBLAS GEMM custom-calls in it.

The agent reads a program's structure from its ``HloModuleProto`` (:mod:`xmon.hlo.proto`), whose
fields XLA defines; XLA does not promise a text format. Text is read here for what only comes as
text: HLO a user pastes, hand-written modules in tests, and the ``xmon.hlo`` functions below that
take ``compiled.as_text()``. Both give the same graph (:mod:`xmon.hlo.graph`).

XLA:GPU lowers some dots (f32 ones, for example) to custom-calls into cuBLAS/cuBLASLt, and
``Compiled.cost_analysis()['flops']`` does not count those: a 4096x4096 f32 matmul reported
16.8 M FLOPs instead of 2*4096**3 = 1.37e11 (H100, jax 0.11.2). PJRT's cost analysis is XLA's
generic HloCostAnalysis, whose HandleCustomCall reports 0 for any custom-call; dots that stay
dots (Triton GEMM fusions, bf16 on the same machine) are counted. xmon therefore adds the GEMM
custom-calls it finds in the optimized module.

A GEMM does 2 * (elements of its output) * (product of the lhs contracting dimension sizes)
FLOPs: GpuHloCostAnalysis::HandleCustomCall (xla/service/gpu/model/gpu_hlo_cost_analysis.cc,
what the profiler's op_profile uses) counts cuBLAS GEMMs this way, with GetDotFlops' one
multiply-add = 2 FLOPs for every element type. The output is the first element of the
custom-call's result tuple (the others are the cuBLAS workspace, amax or auxiliary outputs);
the contracting dimensions come from ``dot_dimension_numbers`` in its ``backend_config``.

Static counting, like XLA's cost analysis: a GEMM in a called computation counts once per call
site; a while-loop body counts once whatever its trip count (``xmon.execution.loop_cost`` weighs
bodies by their trip counts); of a conditional's branches the most expensive one counts. GEMMs
whose shapes are dynamic or whose configuration cannot be read are counted in
:func:`gemm_custom_call_count` but add no FLOPs. Nothing here imports jax, and malformed text
never raises: unreadable parts are skipped.

:func:`parse_modules` gives each module's computations (:class:`Computation`, their
:class:`Instruction` s and text lines), :func:`callees` the call graph, and
:meth:`Module.with_entry` a module whose entry is any one computation (to run XLA's own cost
analysis on it).
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from xmon.hlo.graph import (
    ASYNC_FOLLOWERS,
    GEMM_CALL_TARGETS,
    Computation,
    GemmCall,
    GemmTotals,
    ModuleGraph,
    gemm_flops,
)

_SHAPE_START = r"(?:\(|[a-z][a-z0-9]*\[)"
_INSTRUCTION = re.compile(
    rf"^\s*(?P<root>ROOT\s+)?%?(?P<name>[^\s=%,()]+)\s*=\s*(?P<rest>{_SHAPE_START}.*)$", re.S
)
_HEADER = re.compile(r"^\s*(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(){}=,]+)\s*(?:\(.*\)\s*->.*)?\{\s*$")
_ARRAY_SHAPE = re.compile(r"^\s*(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")
_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]*)"')
_QUOTED = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a string literal, escapes included
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_SINGLE_CALL = re.compile(
    r"\b(?:calls|to_apply|body|condition|true_computation|false_computation|select|scatter)"
    r"=%?(?P<name>[^\s,{}()]+)"
)
_LIST_CALL = re.compile(r"\b(?:calls|branch_computations|called_computations)=\{(?P<names>[^}]*)\}")
_OPEN, _CLOSE = "([{", ")]}"


KNOWN_TRIP_COUNT = re.compile(r'known_trip_count[\\"]*\s*:\s*\{[\\"]*n[\\"]*\s*:\s*[\\"]*(\d+)')
_DIRECTION = re.compile(r"\bdirection=(?P<direction>[A-Z]+)")
_INDEX = re.compile(r"\bindex=(?P<index>\d+)")


@dataclass(frozen=True)
class Instruction:
    """One instruction of HLO text, as printed: ``name = shape opcode(operands), attrs``."""

    name: str
    shape: str
    opcode: str
    operands: tuple[tuple[str, str | None], ...]  # (name, inline shape text or None)
    attrs: str  # everything after the operand list, e.g. ", index=0, metadata={...}"
    is_root: bool = False

    @property
    def operand_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.operands)

    def called(self) -> tuple[list[str], bool]:
        return callees(self)

    def named_computations(self) -> list[str]:
        if self.opcode in ASYNC_FOLLOWERS:
            return _callees(self.attrs)
        return callees(self)[0]

    def called_as(self, role: str) -> str | None:
        match = re.search(rf"\b{role}=%?(?P<name>[^\s,{{}}()]+)", self.attrs)
        return match["name"] if match else None

    @property
    def trip_annotation(self) -> str | None:
        known = KNOWN_TRIP_COUNT.search(self.attrs)
        return known[1] if known else None

    @property
    def direction(self) -> str | None:
        match = _DIRECTION.search(self.attrs)
        return match["direction"] if match else None

    @property
    def tuple_index(self) -> int | None:
        match = _INDEX.search(self.attrs) if self.opcode == "get-tuple-element" else None
        return int(match["index"]) if match else None

    @property
    def parameter_number(self) -> int | None:
        if self.opcode != "parameter" or not self.operands:
            return None
        number = self.operands[0][0]
        return int(number) if number.isdigit() else None

    @property
    def integer_constant(self) -> int | None:
        if self.opcode != "constant" or not self.operands:
            return None
        try:
            return int(self.operands[0][0])
        except ValueError:  # a float, a pred or an array constant
            return None

    @property
    def custom_call_target(self) -> str | None:
        if self.opcode != "custom-call":
            return None
        match = _TARGET.search(self.attrs)
        return match["target"] if match else None


# --- text scanning ---------------------------------------------------------------------------


def _depth_change(text: str) -> int:
    """Net bracket depth of text, ignoring brackets inside double-quoted strings."""
    # str.count and one regex keep this at C speed: it runs on every line of big modules.
    if '"' in text:
        text = _QUOTED.sub("", text)
    return sum(map(text.count, _OPEN)) - sum(map(text.count, _CLOSE))


def _logical_lines(text: str) -> Iterator[str]:
    """Lines of the module with instructions spread over several lines joined into one.

    compiled.as_text() prints one instruction per line; hand-written HLO (XLA's tests) may
    spread one over many: an open bracket or a trailing comma continues it. A new instruction
    start ends an unfinished one, so malformed text cannot swallow the rest of the module.
    """
    pending, depth = "", 0
    for line in text.splitlines():
        if line.lstrip().startswith("//"):
            continue  # HLO text allows C++-style comments
        starts = _INSTRUCTION.match(line) is not None
        if pending and not starts:
            pending, depth = pending + " " + line.strip(), depth + _depth_change(line)
        else:
            if pending:
                yield pending
            pending, depth = (line, _depth_change(line)) if starts else ("", 0)
            if not starts:
                yield line
        if pending and depth <= 0 and not pending.rstrip().endswith(","):
            yield pending
            pending, depth = "", 0
    if pending:
        yield pending


def _matching(text: str, start: int) -> int:
    """Index of the bracket closing the one at text[start], or -1."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] in _OPEN:
            depth += 1
        elif text[index] in _CLOSE:
            depth -= 1
            if depth == 0:
                return index
    return -1


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += (char in _OPEN) - (char in _CLOSE)
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    tail = "".join(current).strip()
    return [*parts, tail] if tail or parts else []


# --- instructions and shapes -----------------------------------------------------------------


def _parse_operand(text: str) -> tuple[str, str | None]:
    # Newer XLA prints "f32[4096,4096]{1,0} %p0", older XLA and tests just "%p0" or "p0".
    text = _COMMENT.sub("", text).strip()
    shape, _, name = text.rpartition(" ")
    return name.lstrip("%"), (shape.strip() or None)


def parse_instruction(line: str) -> Instruction | None:
    """The instruction on one (logical) line of HLO text, or None if the line is not one."""
    match = _INSTRUCTION.match(line)
    if match is None:
        return None
    rest = match["rest"].strip()
    shape_end = _matching(rest, 0) + 1 if rest.startswith("(") else rest.find(" ")
    if shape_end <= 0:
        return None
    call = re.match(r"\s*(?P<opcode>[\w\-]+)\(", rest[shape_end:])
    if call is None:
        return None
    open_at = shape_end + call.end() - 1
    close_at = _matching(rest, open_at)
    if close_at < 0:
        return None
    operands = tuple(_parse_operand(p) for p in _split_top_level(rest[open_at + 1 : close_at]))
    attrs = rest[close_at + 1 :]
    return Instruction(
        match["name"], rest[:shape_end], call["opcode"], operands, attrs, bool(match["root"])
    )


def _array_dims(shape: str) -> tuple[int | None, ...] | None:
    """Dimensions of an array shape, or of a tuple's first element; None marks a dynamic one."""
    shape = shape.strip()
    if shape.startswith("("):
        end = _matching(shape, 0)
        elements = _split_top_level(shape[1:end]) if end > 0 else []
        return _array_dims(elements[0]) if elements else None
    match = _ARRAY_SHAPE.match(shape)
    if match is None:
        return None
    dims = [d.strip() for d in match["dims"].split(",") if d.strip()]
    return tuple(int(d) if d.isdigit() else None for d in dims)


def _dimension_list(attrs: str, key: str) -> tuple[int, ...] | None:
    # Matches JSON ("key":["1"]), JSON escaped inside a quoted backend_config (\"key\":[\"1\"])
    # and the old unquoted form (key:[1]).
    match = re.search(rf"{key}[\\\"']*\s*:\s*\[(?P<values>[^\]]*)\]", attrs)
    if match is None:
        return None
    return tuple(int(v) for v in re.findall(r"-?\d+", match["values"]))


def _gemm_flops(instruction: Instruction, shapes: Mapping[str, str]) -> float | None:
    if not instruction.operands:
        return None
    lhs_name, lhs_inline = instruction.operands[0]
    ragged: tuple[int, ...] = ()
    batch: tuple[int, ...] = ()
    if "lhs_ragged_dimensions" in instruction.attrs:  # grouped GEMM
        ragged = _dimension_list(instruction.attrs, "lhs_ragged_dimensions") or ()
        batch = _dimension_list(instruction.attrs, "lhs_batch_dimensions") or ()
    return gemm_flops(
        _array_dims(instruction.shape),
        _array_dims(lhs_inline or shapes.get(lhs_name, "")),
        _dimension_list(instruction.attrs, "lhs_contracting_dimensions"),
        ragged,
        batch,
    )


# --- modules and call graph ------------------------------------------------------------------


def _split_modules(text: str) -> list[str]:
    chunks = re.split(r"(?m)^(?=HloModule\b)", text)
    return [chunk for chunk in chunks if chunk.strip()]


def callees(instruction: Instruction) -> tuple[list[str], bool]:
    """Computations an instruction runs, and whether only one of them runs (conditional).

    async-done and async-update name the computation of their async-start, which runs it once:
    they call nothing here.
    """
    if instruction.opcode in ASYNC_FOLLOWERS:
        return [], False
    return _callees(instruction.attrs), instruction.opcode == "conditional"


def _callees(attrs: str) -> list[str]:
    if not (_SINGLE_CALL.search(attrs) or _LIST_CALL.search(attrs)):
        return []  # most instructions call nothing: skip the string stripping below
    attrs = _QUOTED.sub('""', attrs)  # op_name="while/body=..." must not count as a call
    names = [m["name"] for m in _SINGLE_CALL.finditer(attrs)]
    for match in _LIST_CALL.finditer(attrs):
        names += [n.strip().lstrip("%") for n in match["names"].split(",") if n.strip()]
    return names


class Module(ModuleGraph[Instruction]):
    """One module read from text: computations by name, the call graph, GEMM custom-calls.

    Computations outside any ``{...}`` block (fragments of text) go to one named "".
    """

    def __init__(self, text: str) -> None:
        self.preamble: list[str] = []  # lines outside computations (stack frame tables...)
        super().__init__(_parse_computations(text, self.preamble))
        shapes = {i.name: i.shape for c in self.computations.values() for i in c.instructions}
        # Names are unique per module in XLA's output, but hand-written HLO reuses them across
        # computations: look in the GEMM's own computation first.
        self.shapes = {
            name: ChainMap({i.name: i.shape for i in c.instructions}, shapes)
            for name, c in self.computations.items()
        }

    def flops_of(
        self, computation: Computation[Instruction], instruction: Instruction
    ) -> float | None:
        return _gemm_flops(instruction, self.shapes[computation.name])

    def with_entry(self, name: str) -> str | None:
        """Module text whose ENTRY is computation ``name``, holding what it calls, or None.

        The lines outside computations (the stack frame tables that metadata refers to) are
        kept, so XLA's parser finds what the instructions point at.
        """
        if name not in self.computations or not name:
            return None
        parts = ["HloModule m", *self.preamble]
        for callee in self.reachable(name):
            lines = self.computations[callee].lines
            if not lines:
                continue
            header = _ENTRY_PREFIX.sub("", lines[0]).lstrip()
            parts += [("ENTRY " if callee == name else "") + header, *lines[1:]]
        return "\n".join(parts) + "\n"


_ENTRY_PREFIX = re.compile(r"^\s*ENTRY\s+")


def _parse_computations(text: str, preamble: list[str]) -> dict[str, Computation[Instruction]]:
    """Computations by name; instructions outside any computation go to an unnamed one.

    Lines before the first computation (but the HloModule line) are appended to ``preamble``:
    XLA prints its stack frame tables there.
    """
    loose: Computation[Instruction] = Computation("", is_entry=False)
    computations: dict[str, Computation[Instruction]] = {}
    current: Computation[Instruction] | None = None
    for line in _logical_lines(text):
        instruction = parse_instruction(line)
        if instruction is not None:
            target = current or loose
            target.instructions.append(instruction)
            target.lines.append(line)
        elif line.strip() == "}" and current is not None:
            current.lines.append(line)
            current = None
        elif (header := _HEADER.match(line)) and not line.lstrip().startswith("HloModule"):
            current = Computation(header["name"], is_entry=bool(header["entry"]), lines=[line])
            computations[current.name] = current
        elif not computations and not line.lstrip().startswith("HloModule"):
            preamble.append(line)
    if loose.instructions:
        computations[""] = loose
    return computations


def parse_modules(hlo_text: object) -> list[Module]:
    """Every module in the text (executables of MPMD programs print several); a module that
    cannot be parsed is left out. Never raises."""
    if not isinstance(hlo_text, str):
        return []
    modules = []
    for chunk in _split_modules(hlo_text):
        try:
            modules.append(Module(chunk))
        except Exception:  # a monitor must survive any text; one bad module hides no others
            continue
    return modules


def gemm_target(instruction: Instruction) -> str | None:
    """The cuBLAS call target of a GEMM custom-call, or None for any other instruction."""
    target = instruction.custom_call_target
    return target if target in GEMM_CALL_TARGETS else None


def _module_totals(hlo_text: object) -> GemmTotals:
    total = GemmTotals()
    for module in parse_modules(hlo_text):
        try:
            total = sum((module.totals(root) for root in module.roots()), total)
        except Exception:  # same policy as parse_modules
            continue
    return total


def custom_call_gemm_flops(hlo_text: str) -> float:
    """FLOPs of the GEMM custom-calls of one run of the program(s) in ``hlo_text``.

    Add this to ``cost_analysis()['flops']``, which leaves these calls out. Per device for
    SPMD programs, like the cost analysis itself. 0.0 when there are none (CPU, TPU).
    """
    return _module_totals(hlo_text).flops


def gemm_custom_call_count(hlo_text: str) -> int:
    """Number of GEMM custom-calls one run executes, counted like custom_call_gemm_flops."""
    return _module_totals(hlo_text).count


def find_gemm_custom_calls(hlo_text: str) -> list[GemmCall]:
    """Every GEMM custom-call instruction in the text, once each, with its own FLOPs."""
    calls: list[GemmCall] = []
    for module in parse_modules(hlo_text):
        try:
            for computation, instruction, target in module.gemm_calls():
                flops = module.flops_of(computation, instruction)
                calls.append(GemmCall(instruction.name, computation.name, target, flops))
        except Exception:  # same policy as parse_modules
            continue
    return calls
