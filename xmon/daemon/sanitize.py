"""Numbers from agents made safe before anything computes with them.

A job (buggy or hostile) can send any IEEE value in any float field: ``inf`` as its start time
once stopped the TensorBoard export of every job (``int(round(inf))`` raises), and ``NaN`` in
the JSON of a snapshot is not JSON. At ingest every non-finite float is dropped (a singular
field goes back to unset, which the snapshot shows as unknown), and wall-clock times outside
1970..2286 too, since formatting them (``time.localtime``) raises.
"""

from __future__ import annotations

import math

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

WALL_TIME_MAX = 1e10  # seconds since the epoch: the year 2286
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


def _is_wall_time(name: str) -> bool:
    return name.endswith("_at") or name == "wall_time"


def _ok(value: float, wall_time: bool) -> bool:
    return math.isfinite(value) and (not wall_time or 0.0 <= value <= WALL_TIME_MAX)


def scrub(message: Message) -> int:
    """Drop non-finite floats (and impossible wall times) everywhere in ``message``, in place;
    returns how many values were dropped."""
    dropped = 0
    for field, value in message.ListFields():
        if field.type in _FLOATS:
            dropped += _scrub_floats(message, field, value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                values = value.values() if _map_of_messages(field) else ()
            else:
                values = value if field.is_repeated else (value,)
            dropped += sum(scrub(sub) for sub in values)
    return dropped


def _map_of_messages(field: FieldDescriptor) -> bool:
    return bool(field.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE)


def _scrub_floats(message: Message, field: FieldDescriptor, value: object) -> int:
    wall_time = _is_wall_time(field.name)
    if not field.is_repeated:
        if _ok(float(value), wall_time):  # type: ignore[arg-type]
            return 0
        message.ClearField(field.name)
        return 1
    numbers = list(value)  # type: ignore[call-overload]
    kept = [v for v in numbers if _ok(v, wall_time)]
    if len(kept) != len(numbers):
        del value[:]  # type: ignore[attr-defined]
        value.extend(kept)  # type: ignore[attr-defined]
    return len(numbers) - len(kept)
