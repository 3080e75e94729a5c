"""Moving values between the wire protocol and the model, where their field names agree.

The proto messages that mirror a model class use the model's field names, so conversions are
driven by the proto's own descriptor instead of hand-written field lists on both sides.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache  # message classes are few and fixed; the daemon converts every report
def field_names(message_class: Any) -> tuple[str, ...]:
    return tuple(f.name for f in message_class.DESCRIPTOR.fields)


def optional_field_names(message_class: Any) -> tuple[str, ...]:
    """Fields declared ``optional``: unset on the wire means unknown (None in the model)."""
    return tuple(f.name for f in message_class.DESCRIPTOR.fields if f.has_presence)


def fields_of(source: Any, message_class: Any) -> dict[str, Any]:
    """``{name: source.name}`` for every field of ``message_class``."""
    return {name: getattr(source, name) for name in field_names(message_class)}
