"""HLO modules read from a serialized ``HloModuleProto`` (``as_serialized_hlo_module_proto()``).

The fields are XLA's own (:file:`xmon/wire/proto/hlo.proto` declares the ones xmon reads, with
XLA's numbers): a while's body and condition are its ``called_computation_ids`` (body first,
as ``HloInstruction::CreateWhile`` appends them), its trip count is ``known_trip_count`` in its
JSON ``backend_config`` (``WhileLoopBackendConfig``), a compare's direction, a tuple index, a
parameter number and a constant's value are fields. Nothing depends on how XLA prints a module.

A module is cut down to one computation for XLA's cost analysis by copying that computation and
what it calls, each as it was read (protobuf writes back the fields this subset does not
declare), under a new module header: no schedule, aliasing or sharding of the original entry
comes along. Nothing here imports jax; a malformed module gives an empty graph, never an
exception.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from xmon.hlo.graph import ASYNC_FOLLOWERS, Computation, ModuleGraph, gemm_flops
from xmon.wire.proto import hlo_pb2

_WHILE_BODY, _WHILE_CONDITION = 0, 1  # HloInstruction's kBodyComputationIndex, kCondition...
# Fusions, calls and async-starts run the computation they name first; reductions and sorts
# apply theirs to elements ("to_apply"), which XLA's cost analysis weighs itself.
_ROLE_INDEX = {"body": _WHILE_BODY, "condition": _WHILE_CONDITION, "calls": 0}
_TUPLE = 13  # xla.PrimitiveType TUPLE
_MAX_JSON_BYTES = 1 << 20  # a backend_config larger than this is not a while's or a GEMM's


def _backend_config(message: Any) -> dict[str, Any]:
    raw = message.backend_config
    if not raw or len(raw) > _MAX_JSON_BYTES or not raw.lstrip().startswith(b"{"):
        return {}
    try:
        config = json.loads(raw)
    except ValueError:  # not JSON (a backend's binary config): nothing xmon reads
        return {}
    return config if isinstance(config, dict) else {}


def _trip_digits(message: Any) -> str | None:
    """The digits of ``known_trip_count.n`` in a while's backend_config (an int64, which
    proto's JSON prints as a string), or None."""
    known = _backend_config(message).get("known_trip_count")
    count = known.get("n") if isinstance(known, dict) else None
    if isinstance(count, bool) or not isinstance(count, (str, int)):
        return None
    digits = str(count)
    return digits if digits.isdigit() else None


def _find(config: object, key: str, depth: int = 0) -> object:
    """The first value under ``key`` anywhere in nested JSON objects (GEMM configs nest their
    dot_dimension_numbers one level down), or None."""
    if not isinstance(config, dict) or depth > 8:
        return None
    if key in config:
        return config[key]
    for value in config.values():
        found = _find(value, key, depth + 1)
        if found is not None:
            return found
    return None


def _int_list(value: object) -> tuple[int, ...] | None:
    """A JSON list of int64s (printed as strings by proto's JSON), or None."""
    if not isinstance(value, list):
        return None
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        return None


def _array_dims(shape: Any) -> tuple[int | None, ...] | None:
    """Dimensions of an array shape, or of a tuple's first element; None marks a dynamic one."""
    for _ in range(8):  # tuples of tuples, bounded
        if shape.element_type != _TUPLE:
            break
        if not shape.tuple_shapes:
            return None
        shape = shape.tuple_shapes[0]
    else:
        return None
    dynamic = list(shape.is_dynamic_dimension)
    return tuple(
        None if (k < len(dynamic) and dynamic[k]) or size < 0 else int(size)
        for k, size in enumerate(shape.dimensions)
    )


class Instruction:
    """One instruction of a module proto, read on demand from its message."""

    __slots__ = ("_called", "_message", "_module", "is_root", "name", "opcode")

    def __init__(self, message: Any, module: ProtoModule, is_root: bool) -> None:
        self._message = message
        self._module = module
        self.name: str = message.name
        self.opcode: str = message.opcode
        self.is_root = is_root
        # Read once: the call graph is walked many times, and most instructions call nothing.
        ids = message.called_computation_ids
        names = module.computation_names
        self._called: tuple[str, ...] = tuple(names[i] for i in ids if i in names) if ids else ()

    @property
    def operand_names(self) -> tuple[str, ...]:
        names = self._module.instruction_names
        return tuple(names.get(i, "") for i in self._message.operand_ids)

    def called(self) -> tuple[list[str], bool]:
        if self.opcode in ASYNC_FOLLOWERS or not self._called:
            return [], False
        return list(self._called), self.opcode == "conditional"

    def named_computations(self) -> list[str]:
        return list(self._called)

    def called_as(self, role: str) -> str | None:
        index = _ROLE_INDEX.get(role)
        if index is None or (role != "calls") != (self.opcode == "while"):
            return None
        ids = self._message.called_computation_ids
        return self._module.computation_names.get(ids[index]) if index < len(ids) else None

    @property
    def trip_annotation(self) -> str | None:
        return _trip_digits(self._message) if self.opcode == "while" else None

    @property
    def direction(self) -> str | None:
        return (self._message.comparison_direction or None) if self.opcode == "compare" else None

    @property
    def tuple_index(self) -> int | None:
        return int(self._message.tuple_index) if self.opcode == "get-tuple-element" else None

    @property
    def parameter_number(self) -> int | None:
        return int(self._message.parameter_number) if self.opcode == "parameter" else None

    @property
    def integer_constant(self) -> int | None:
        if self.opcode != "constant" or not self._message.HasField("literal"):
            return None
        literal = self._message.literal
        if literal.shape.dimensions or literal.shape.element_type == _TUPLE:
            return None  # an array: not an induction bound
        for values in (literal.s32s, literal.s64s, literal.u32s, literal.u64s):
            if len(values) == 1:
                return int(values[0])
        if len(literal.s8s) == 1:
            return int.from_bytes(literal.s8s, "little", signed=True)
        if len(literal.u8s) == 1:
            return literal.u8s[0]
        return None  # a float or a pred

    @property
    def custom_call_target(self) -> str | None:
        return self._message.custom_call_target if self.opcode == "custom-call" else None

    def gemm_flops(self) -> float | None:
        config = _backend_config(self._message)
        lhs_id = self._message.operand_ids[0] if self._message.operand_ids else None
        lhs = self._module.instruction_shapes.get(lhs_id) if lhs_id is not None else None
        return gemm_flops(
            _array_dims(self._message.shape),
            _array_dims(lhs) if lhs is not None else None,
            _int_list(_find(config, "lhs_contracting_dimensions")),
            _int_list(_find(config, "lhs_ragged_dimensions")) or (),
            _int_list(_find(config, "lhs_batch_dimensions")) or (),
        )


class ProtoModule(ModuleGraph[Instruction]):
    """One module read from its proto: computations by name, the call graph, GEMM custom-calls."""

    def __init__(self, message: Any) -> None:
        self._message = message
        self.computation_names: dict[int, str] = {c.id: c.name for c in message.computations}
        self.instruction_names: dict[int, str] = {}
        self.instruction_shapes: dict[int, Any] = {}
        self._protos: dict[str, Any] = {}
        computations: dict[str, Computation[Instruction]] = {}
        for proto in message.computations:
            computation: Computation[Instruction] = Computation(
                proto.name, is_entry=proto.id == message.entry_computation_id
            )
            for item in proto.instructions:
                computation.instructions.append(Instruction(item, self, item.id == proto.root_id))
                self.instruction_names[item.id] = item.name
                self.instruction_shapes[item.id] = item.shape
            computations[proto.name] = computation
            self._protos[proto.name] = proto
        super().__init__(computations)

    @property
    def name(self) -> str:
        return str(self._message.name)

    def flops_of(
        self, computation: Computation[Instruction], instruction: Instruction
    ) -> float | None:
        return instruction.gemm_flops()

    def with_entry(self, name: str) -> bytes | None:
        """A serialized module whose entry is computation ``name``, holding what it calls (in
        the order read: callees first), with the original stack frame index that metadata
        refers to; None for an unknown computation."""
        entry = self._protos.get(name)
        if entry is None:
            return None
        module = hlo_pb2.HloModuleProto(
            name=self._message.name,
            entry_computation_name=name,
            entry_computation_id=entry.id,
            host_program_shape=entry.program_shape,
            id=self._message.id,
            stack_frame_index=self._message.stack_frame_index,
        )
        for callee in self.reachable(name):
            module.computations.append(self._protos[callee])
        return module.SerializeToString()


def read_module(serialized: bytes) -> ProtoModule | None:
    """The module in ``serialized`` (an ``HloModuleProto``), or None if it is not one."""
    if not isinstance(serialized, (bytes, bytearray, memoryview)):
        return None
    try:
        return ProtoModule(hlo_pb2.HloModuleProto.FromString(bytes(serialized)))
    except (DecodeError, RecursionError, ValueError):
        return None


def read_modules(serialized: Sequence[bytes]) -> list[ProtoModule]:
    """Every module that can be read (an executable of an MPMD program has several)."""
    return [module for module in map(read_module, serialized) if module is not None]


@dataclass(frozen=True)
class Scan:
    """What a module too large to build a graph of shows without one."""

    whiles: tuple[tuple[str, str | None], ...]  # (name, trip count digits or None)
    custom_call_targets: frozenset[str]


def scan_module(serialized: bytes) -> Scan:
    """Every while instruction with its trip count annotation, and every custom-call target:
    protobuf decodes the module in C, and only these fields are read from Python."""
    module = hlo_pb2.HloModuleProto.FromString(bytes(serialized))
    whiles, targets = [], set()
    for computation in module.computations:
        for item in computation.instructions:
            if item.opcode == "while":
                whiles.append((item.name, _trip_digits(item)))
            elif item.opcode == "custom-call":
                targets.add(item.custom_call_target)
    return Scan(tuple(whiles), frozenset(targets))
