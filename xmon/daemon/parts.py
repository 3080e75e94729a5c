"""Messages an agent sent in parts (``MessagePart``, see :mod:`xmon.wire`), joined again.

A stream's parts come back to back, in order. What one stream may have the daemon hold while
joining is the largest message it takes (``max_message_bytes``); what all streams together may,
``max_joining_bytes``. A message past either, or parts out of order, is dropped whole (counted
as refused, ``bound="message_parts"``) and the stream goes on with its next message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from xmon.daemon.bounds import StateBudget
from xmon.proto import xmon_pb2

MAX_JOINING_BYTES = 64 * 1024 * 1024


@dataclass
class JoiningPool:
    """Bytes held in parts not yet joined, over all streams."""

    budget: StateBudget
    max_bytes: int = MAX_JOINING_BYTES
    in_use: int = 0


@dataclass
class PartJoiner:
    """One stream's message in parts."""

    pool: JoiningPool
    max_message_bytes: int
    _parts: list[bytes] = field(default_factory=list)
    _size: int = 0
    _dropping: bool = False  # past a bound: the rest of this message's parts are let go

    def add(self, part: xmon_pb2.MessagePart) -> xmon_pb2.AgentMessage | None:
        """The joined message once ``part`` is its last, else None (also for a message
        dropped at a bound or for a part out of order)."""
        if part.index == 0:
            if self._parts:  # the message before never had its last part
                self._drop()
            self._reset()
        elif self._dropping or part.index != len(self._parts):
            self._let_go(part, count=not self._dropping)
            return None
        size = len(part.data)
        if self._size + size > self.max_message_bytes or (
            self.pool.in_use + size > self.pool.max_bytes
        ):
            self._let_go(part)
            return None
        self._parts.append(part.data)
        self._size += size
        self.pool.in_use += size
        if not part.last:
            return None
        data = b"".join(self._parts)
        self._reset()
        return _parse(data, self.pool.budget)

    def close(self) -> None:
        """The stream has ended: give back what its unfinished message held."""
        self._reset()

    def _let_go(self, part: xmon_pb2.MessagePart, count: bool = True) -> None:
        """Drop the message ``part`` belongs to, and the parts of it still to come."""
        self._drop(count)
        self._dropping = not part.last

    def _drop(self, count: bool = True) -> None:
        if count:
            self.pool.budget.refuse("message_parts")
        self._reset()

    def _reset(self) -> None:
        self.pool.in_use -= self._size
        self._parts, self._size, self._dropping = [], 0, False


def _parse(data: bytes, budget: StateBudget) -> xmon_pb2.AgentMessage | None:
    """The joined message; None (refused) when it is not one, or is a hello or a part itself."""
    try:
        message = xmon_pb2.AgentMessage.FromString(data)
    except DecodeError:
        budget.refuse("message_parts")
        return None
    if message.WhichOneof("kind") in (None, "hello", "part"):
        budget.refuse("message_parts")
        return None
    return message
