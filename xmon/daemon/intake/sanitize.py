"""Numbers from agents made safe before anything computes with them.

A job (buggy or hostile) can send any IEEE value in any float field: ``inf`` as its start time
once stopped the TensorBoard export of every job (``int(round(inf))`` raises), and ``NaN`` in
the JSON of a snapshot is not JSON. At ingest every non-finite float is dropped (a singular
field goes back to unset, which the snapshot shows as unknown), and wall-clock times outside
1970..2286 too, since formatting them (``time.localtime``) raises.

``scrub`` walks a whole message (a hello, an out-of-memory report). The conversion of a report,
which reads each of its floats anyway, reads them through ``finite``, ``wall_time`` and their
kin instead, which leave each value as ``scrub`` would (xmon.daemon.intake.convert).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from xmon.daemon.bounds import WALL_TIME_MAX

_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


def _is_wall_time(name: str) -> bool:
    return name.endswith("_at") or name == "wall_time"


def _ok(value: float, wall_time: bool) -> bool:
    return math.isfinite(value) and (not wall_time or 0.0 <= value <= WALL_TIME_MAX)


def scrub(message: Message) -> int:
    """Drop non-finite floats (and impossible wall times) everywhere in ``message``, in place;
    returns how many values were dropped. Only fields that can hold a float are walked."""
    plan = _plan(message.DESCRIPTOR)
    if not plan:
        return 0
    dropped = 0
    for field, value in message.ListFields():
        kind = plan.get(field.name)
        if kind is None:
            continue
        if kind is _Kind.FLOAT:
            dropped += _scrub_floats(message, field, value)
        elif kind is _Kind.MAP:
            dropped += sum(scrub(sub) for sub in value.values())
        elif kind is _Kind.FLOAT_MAP:
            bad = [key for key, number in value.items() if not math.isfinite(number)]
            for key in bad:
                del value[key]
            dropped += len(bad)
        else:
            dropped += sum(scrub(sub) for sub in value) if field.is_repeated else scrub(value)
    return dropped


def finite(value: float) -> float:
    """A float as ``scrub`` leaves it: 0.0 (unset) where it is not finite."""
    return value if math.isfinite(value) else 0.0


def wall_time(value: float) -> float:
    """A wall-clock time as ``scrub`` leaves it: 0.0 (unset) outside 1970..2286 (NaN too)."""
    return value if 0.0 <= value <= WALL_TIME_MAX else 0.0


def optional_finite(message: Any, name: str) -> float | None:
    """An ``optional`` number field: None where unset or not finite (an integer is kept)."""
    if not message.HasField(name):
        return None
    value: float = getattr(message, name)
    return value if math.isfinite(value) else None


def optional_wall(message: Any, name: str) -> float | None:
    """An ``optional`` wall-clock time field: None where unset or outside 1970..2286."""
    if not message.HasField(name):
        return None
    value: float = getattr(message, name)
    return value if 0.0 <= value <= WALL_TIME_MAX else None


def finite_tuple(values: Sequence[float]) -> tuple[float, ...]:
    """A repeated float field without its non-finite values."""
    if all(map(math.isfinite, values)):  # the common case, in C
        return tuple(values)
    return tuple(v for v in values if math.isfinite(v))


class _Kind(enum.Enum):
    FLOAT = "float"  # a float or double, or a repeated one
    MESSAGE = "message"  # a message, or repeated messages, that can hold floats
    MAP = "map"  # a map whose values are such messages
    FLOAT_MAP = "float_map"  # a map whose values are floats


_PLANS: dict[Descriptor, dict[str, _Kind]] = {}
_WALK_ALL: dict[str, _Kind] = {"": _Kind.MESSAGE}  # a type still being planned: descend into it


def _plan(descriptor: Descriptor) -> dict[str, _Kind]:
    """The fields of a message type that are or can hold floats (by name), worked out once per
    type. A report's memory samples (maps of integers) and most of a hello hold none: the
    daemon does not walk them for every report of every agent."""
    plan = _PLANS.get(descriptor)
    if plan is not None:
        return plan
    _PLANS[descriptor] = _WALK_ALL  # a type that holds itself is walked, whatever it holds
    plan = {}
    for field in descriptor.fields:
        if field.type in _FLOATS:
            plan[field.name] = _Kind.FLOAT
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                value = field.message_type.fields_by_name["value"]
                if value.type in _FLOATS:
                    plan[field.name] = _Kind.FLOAT_MAP
                elif value.type == FieldDescriptor.TYPE_MESSAGE and _plan(value.message_type):
                    plan[field.name] = _Kind.MAP
            elif _plan(field.message_type):
                plan[field.name] = _Kind.MESSAGE
    _PLANS[descriptor] = plan
    return plan


def _scrub_floats(message: Message, field: FieldDescriptor, value: object) -> int:
    wall_time = _is_wall_time(field.name)
    if not field.is_repeated:
        if _ok(float(value), wall_time):  # type: ignore[arg-type]
            return 0
        message.ClearField(field.name)
        return 1
    if not wall_time and all(map(math.isfinite, value)):  # type: ignore[call-overload]
        return 0  # the common case, in C
    numbers = list(value)  # type: ignore[call-overload]
    kept = [v for v in numbers if _ok(v, wall_time)]
    if len(kept) != len(numbers):
        del value[:]  # type: ignore[attr-defined]
        value.extend(kept)  # type: ignore[attr-defined]
    return len(numbers) - len(kept)
