"""Trip counts of XLA while loops, read from an HLO module's graph (pure: no jax).

XLA's ``known_trip_count`` backend_config annotation where present; else a condition comparing
a simple induction variable (a get-tuple-element of the loop state, possibly inside a fusion)
with a constant, the initial value from the while's operand tuple and the step from the body's
root tuple; else unknown. The graph comes from the module's proto (:mod:`xmon.hlo.proto`) or
its text (:mod:`xmon.hlo.text`); a malformed module gives "unknown", never an exception.
"""

from __future__ import annotations

from typing import Any

from xmon.hlo.graph import Computation, Instruction, ModuleGraph

Module = ModuleGraph[Any]
_FLIPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE", "EQ": "EQ"}
_PASS_THROUGH = frozenset({"copy", "convert", "bitcast", "reshape"})  # keep a scalar's value


# No loop of a program runs more trips than this (2^40: a trillion). A count past it, in an
# annotation or derived from the condition, is not believed: such a body, weighed that many
# times, would turn FLOPs into infinity instead of a lower bound.
MAX_TRIP_COUNT = 1 << 40


def trip_count(
    module: Module, computation: Computation[Any], loop: Instruction
) -> tuple[int | None, str]:
    """Trip count of a while instruction and where it came from."""
    known = loop.trip_annotation
    if known is not None:
        trips = annotated_trips(known)
        return (trips, "known_trip_count") if trips is not None else (None, "unknown")
    try:
        derived = _trip_count_from_condition(module, computation, loop)
    except (ValueError, IndexError, KeyError):  # malformed text: the count is just unknown
        derived = None
    return (derived, "condition") if _plausible(derived) else (None, "unknown")


def _plausible(trips: int | None) -> bool:
    return trips is not None and 0 <= trips <= MAX_TRIP_COUNT


def annotated_trips(digits: str) -> int | None:
    """XLA's ``known_trip_count`` annotation's number, or None past ``MAX_TRIP_COUNT`` (read
    without converting a thousand digits)."""
    trips = int(digits) if len(digits) <= 13 else None
    return trips if _plausible(trips) else None


def _trip_count_from_condition(
    module: Module, computation: Computation[Any], loop: Instruction
) -> int | None:
    condition = module.computations.get(loop.called_as("condition") or "")
    body = module.computations.get(loop.called_as("body") or "")
    if condition is None or body is None or not loop.operand_names:
        return None
    compared = _comparison(module, condition)
    if compared is None:
        return None
    index, bound, direction = compared
    init = _tuple_element_constant(computation, loop.operand_names[0], index)
    step = _step(module, body, index)
    if init is None or step is None:
        return None
    return _count(init, bound, step, direction)


def _comparison(module: Module, condition: Computation[Any]) -> tuple[int, int, str] | None:
    """(state index, constant, direction) of a condition ``state[index] <direction> constant``."""
    root = condition.root()
    if root is None:
        return None
    resolved = _binary(module, condition, root, "compare")
    if resolved is None:
        return None
    (lhs_comp, lhs), (rhs_comp, rhs), compare = resolved
    direction = compare.direction
    if direction is None:
        return None
    lhs_index, rhs_index = _state_index(lhs_comp, lhs), _state_index(rhs_comp, rhs)
    lhs_const, rhs_const = _constant(lhs_comp, lhs), _constant(rhs_comp, rhs)
    if lhs_index is not None and rhs_const is not None:
        return lhs_index, rhs_const, direction
    if rhs_index is not None and lhs_const is not None:
        return rhs_index, lhs_const, _FLIPPED.get(direction, "")
    return None


Operand = tuple[Computation[Any], str]  # an operand name and the computation defining it


def _binary(
    module: Module, computation: Computation[Any], instruction: Instruction, opcode: str
) -> tuple[Operand, Operand, Instruction] | None:
    """Operands of a two-operand ``opcode`` and the instruction itself, looking through a
    fusion whose root it is (CPU and GPU XLA wrap even a scalar compare or add in one)."""
    if instruction.opcode == opcode and len(instruction.operand_names) == 2:
        lhs, rhs = instruction.operand_names
        return (computation, lhs), (computation, rhs), instruction
    if instruction.opcode != "fusion":
        return None
    fused = module.computations.get(instruction.called_as("calls") or "")
    root = fused.root() if fused is not None else None
    if fused is None or root is None or root.opcode != opcode or len(root.operand_names) != 2:
        return None
    outer = [_fusion_operand(computation, instruction, fused, name) for name in root.operand_names]
    if outer[0] is None or outer[1] is None:
        return None
    return outer[0], outer[1], root


def _fusion_operand(
    computation: Computation[Any], fusion: Instruction, fused: Computation[Any], name: str
) -> Operand | None:
    """The fusion operand that fused parameter ``name`` stands for; a fused constant as is."""
    inner = fused.instruction(name)
    if inner is None:
        return None
    if inner.opcode == "constant":
        return fused, name
    number = inner.parameter_number
    if number is None:
        return None
    operands = fusion.operand_names
    return (computation, operands[number]) if 0 <= number < len(operands) else None


def _follow(computation: Computation[Any], name: str) -> Instruction | None:
    """The instruction defining ``name``, looking through value-preserving copies."""
    for _ in range(16):  # a bound, for cycles in malformed text
        instruction = computation.instruction(name)
        if instruction is None or instruction.opcode not in _PASS_THROUGH:
            return instruction
        if not instruction.operand_names:
            return None
        name = instruction.operand_names[0]
    return None


def _state_index(computation: Computation[Any], name: str) -> int | None:
    """k where ``name`` is get-tuple-element(parameter, index=k) of the loop state."""
    instruction = _follow(computation, name)
    if instruction is None or instruction.opcode != "get-tuple-element":
        return None
    operands = instruction.operand_names
    source = computation.instruction(operands[0]) if operands else None
    if source is None or source.opcode != "parameter":
        return None
    return instruction.tuple_index


def _constant(computation: Computation[Any], name: str) -> int | None:
    """The value of a scalar integer constant (not a float or array: no induction bound)."""
    instruction = _follow(computation, name)
    return instruction.integer_constant if instruction is not None else None


def _tuple_element_constant(computation: Computation[Any], name: str, index: int) -> int | None:
    """The constant at ``index`` of the tuple the while starts from."""
    state = _follow(computation, name)
    if state is None or state.opcode != "tuple" or index >= len(state.operand_names):
        return None
    return _constant(computation, state.operand_names[index])


def _step(module: Module, body: Computation[Any], index: int) -> int | None:
    """s where the body's root tuple sets ``state[index] = state[index] + s`` (or minus)."""
    root = body.root()
    if root is None or root.opcode != "tuple" or index >= len(root.operand_names):
        return None
    update = _follow(body, root.operand_names[index])
    if update is None:
        return None
    for opcode, sign in (("add", 1), ("subtract", -1)):
        resolved = _binary(module, body, update, opcode)
        if resolved is None:
            continue
        (lhs_comp, lhs), (rhs_comp, rhs), _ = resolved
        if _state_index(lhs_comp, lhs) == index and (step := _constant(rhs_comp, rhs)) is not None:
            return sign * step
        if opcode == "add" and _state_index(rhs_comp, rhs) == index:
            step = _constant(lhs_comp, lhs)
            return step
    return None


def _count(init: int, bound: int, step: int, direction: str) -> int | None:
    """Trips of ``for (i = init; i <direction> bound; i += step)``; None if it never ends."""
    if direction in ("LT", "LE"):
        last = bound - 1 if direction == "LT" else bound
        if init > last:
            return 0
        return (last - init) // step + 1 if step > 0 else None
    if direction in ("GT", "GE"):
        last = bound + 1 if direction == "GT" else bound
        if init < last:
            return 0
        return (init - last) // -step + 1 if step < 0 else None
    if direction == "NE" and step != 0 and (bound - init) % step == 0:
        trips = (bound - init) // step
        return trips if trips >= 0 else None
    return None
