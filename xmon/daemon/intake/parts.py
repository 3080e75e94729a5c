"""Messages an agent sent in parts (``MessagePart``, see :mod:`xmon.wire.protocol`), joined again.

A stream's parts come back to back, in order. What one stream may have the daemon hold while
joining is the largest message it takes (``max_message_bytes``); what all streams together may,
``max_joining_bytes``. A message past either, or parts out of order, is dropped whole (counted
as refused, ``bound="message_parts"``) and the stream goes on with its next message.

Streams that start messages and never finish them cannot keep the pool from others: an agent
sends a message's parts back to back, so a message still unfinished ``STALE_SECONDS`` after its
first part is dropped (counted) when another stream needs its room, the oldest first. Every
part but the last carries at least ``MIN_PART_BYTES`` (agents send the part size the welcome
names), so a flood of empty parts is refused part by part, and a stream whose messages in parts
are refused ``MAX_REFUSED_IN_A_ROW`` times in a row is ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from xmon.daemon.bounds import StateBudget
from xmon.wire.proto import xmon_pb2

MAX_JOINING_BYTES = 64 * 1024 * 1024
STALE_SECONDS = 10.0
MIN_PART_BYTES = 1024
MAX_REFUSED_IN_A_ROW = 16


@dataclass
class JoiningPool:
    """Bytes held in parts not yet joined, over all streams."""

    budget: StateBudget
    max_bytes: int = MAX_JOINING_BYTES
    in_use: int = 0
    stale_seconds: float = STALE_SECONDS
    clock: Callable[[], float] = time.monotonic
    # The streams holding an unfinished message, by identity.
    holders: dict[int, PartJoiner] = field(default_factory=dict)

    def room_for(self, size: int, asking: PartJoiner) -> bool:
        """Whether ``size`` more bytes fit, after dropping other streams' messages that have
        been unfinished for ``stale_seconds``, the oldest first, until they do."""
        now = self.clock()
        while self.in_use + size > self.max_bytes:
            stale = [
                j
                for j in self.holders.values()
                if j is not asking and now - j.started >= self.stale_seconds
            ]
            if not stale:
                return False
            min(stale, key=lambda j: j.started).evict()
        return True


@dataclass
class PartJoiner:
    """One stream's message in parts."""

    pool: JoiningPool
    max_message_bytes: int
    _parts: list[bytes] = field(default_factory=list)
    _size: int = 0
    _dropping: bool = False  # past a bound: the rest of this message's parts are let go
    started: float = 0.0  # the pool's clock at the message's first part
    refused_in_a_row: int = 0  # messages in parts refused since the last one joined

    @property
    def abusive(self) -> bool:
        """The stream's messages in parts keep being refused: end it."""
        return self.refused_in_a_row >= MAX_REFUSED_IN_A_ROW

    def evict(self) -> None:
        """Another stream needs the room this stale message holds: drop it, and let go of the
        parts of it still to come."""
        self._drop()
        self._dropping = True

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
        if (
            (not part.last and size < MIN_PART_BYTES)
            or self._size + size > self.max_message_bytes
            or not self.pool.room_for(size, self)
        ):
            self._let_go(part)
            return None
        if not self._parts:
            self.started = self.pool.clock()
            self.pool.holders[id(self)] = self
        self._parts.append(part.data)
        self._size += size
        self.pool.in_use += size
        if not part.last:
            return None
        data = b"".join(self._parts)
        self._reset()
        message = _parse(data, self.pool.budget)
        self.refused_in_a_row = 0 if message is not None else self.refused_in_a_row + 1
        return message

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
            self.refused_in_a_row += 1
        self._reset()

    def _reset(self) -> None:
        self.pool.in_use -= self._size
        self.pool.holders.pop(id(self), None)
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
