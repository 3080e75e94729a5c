"""An XSpace read in pieces, within bounds set before the read starts.

Execution samples and captured traces come from jobs, and a job can send anything. Parsing a
whole XSpace at once costs memory in proportion to its events (protobuf's upb runtime holds
every message it decoded until the whole space goes), and what the daemon builds per distinct
program, device and run id costs more: one 15 MiB sample whose every event had its own ids took
~400 MiB and 9 s of CPU. So the space is walked at the wire level and decoded one plane header
and at most ``CHUNK_BYTES`` of one line's events at a time, and every count is checked against
its bound before it is acted on: a space past one raises :class:`BoundExceeded` naming the
bound (its ``xmon_daemon_refused_total`` label).

Field numbers are those of ``xmon/wire/proto/xplane.proto`` (the profiler's own): XSpace.planes 1;
XPlane.lines 3, event_metadata 4, stat_metadata 5; XLine.events 4.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError

from xmon.wire.proto import xplane_pb2
from xmon.wire.protocol import SAMPLE_MAX_BYTES

SPACE_PLANES = 1
PLANE_LINES, PLANE_EVENT_METADATA, PLANE_STAT_METADATA = 3, 4, 5
LINE_EVENTS = 4
CHUNK_BYTES = 1 << 20  # events decoded at once: what one decode may hold
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5

Buffer = bytes | memoryview | mmap.mmap  # mmap: a trace file, mapped


@dataclass(frozen=True)
class SpaceBounds:
    """What one read of an XSpace may cost: its bytes, planes, events, metadata entries per
    plane (each becomes a table entry) and distinct program, device and run ids."""

    max_bytes: int
    max_planes: int
    max_events: int
    max_metadata: int
    max_programs: int
    max_devices: int
    max_runs: int


# An execution sample is 0.2 s of a job: a busy GPU job records a few thousand ops a device.
SAMPLE_BOUNDS = SpaceBounds(
    max_bytes=SAMPLE_MAX_BYTES, max_planes=1024, max_events=131_072, max_metadata=65_536,
    max_programs=4096, max_devices=1024, max_runs=65_536,
)  # fmt: skip
# A capture is seconds of a job, every op traced: larger, and read once per capture.
TRACE_BOUNDS = SpaceBounds(
    max_bytes=256 << 20, max_planes=4096, max_events=4_194_304, max_metadata=262_144,
    max_programs=4096, max_devices=1024, max_runs=1_048_576,
)  # fmt: skip


class BoundExceeded(Exception):
    """A space past one of its bounds; ``bound`` is the refusal's label."""

    def __init__(self, bound: str, why: str) -> None:
        super().__init__(why)
        self.bound = bound


class NotASpace(Exception):
    """Bytes that are not a serialized XSpace."""


def check_ids(bounds: SpaceBounds, programs: int, devices: int, runs: int) -> None:
    """Raise BoundExceeded when a reader holds more distinct ids than the bounds allow."""
    for what, count, limit in (
        ("programs", programs, bounds.max_programs),
        ("devices", devices, bounds.max_devices),
        ("run ids", runs, bounds.max_runs),
    ):
        if count > limit:
            raise BoundExceeded("xspace_ids", f"more than {limit} distinct {what}")


class SpaceReader:
    """Yields an XSpace's planes as (header, lines): the header is the plane without its
    lines; each line comes in pieces of at most CHUNK_BYTES of events."""

    def __init__(self, data: Buffer, bounds: SpaceBounds) -> None:
        if len(data) > bounds.max_bytes:
            raise BoundExceeded("xspace_bytes", f"{len(data)} bytes, more than {bounds.max_bytes}")
        self._data = data
        self.bounds = bounds
        self.events = 0

    def planes(self) -> Iterator[tuple[xplane_pb2.XPlane, Iterator[xplane_pb2.XLine]]]:
        count = 0
        for number, start, end in _fields(self._data, 0, len(self._data)):
            if number != SPACE_PLANES:
                continue
            count += 1
            if count > self.bounds.max_planes:
                raise BoundExceeded("xspace_planes", f"more than {self.bounds.max_planes} planes")
            yield self._plane(start, end)

    def _plane(self, start: int, end: int) -> tuple[xplane_pb2.XPlane, Iterator[xplane_pb2.XLine]]:
        header, lines, metadata = bytearray(), [], 0
        for number, field_start, field_end, raw in _raw_fields(self._data, start, end):
            if number == PLANE_LINES:
                lines.append((field_start, field_end))
                continue
            metadata += number in (PLANE_EVENT_METADATA, PLANE_STAT_METADATA)
            if metadata > self.bounds.max_metadata:
                raise BoundExceeded(
                    "xspace_ids", f"more than {self.bounds.max_metadata} metadata in a plane"
                )
            header += self._data[raw:field_end]
        return _decode(xplane_pb2.XPlane, header), self._lines(lines)

    def _lines(self, spans: list[tuple[int, int]]) -> Iterator[xplane_pb2.XLine]:
        for start, end in spans:
            yield from self._line(start, end)

    def _line(self, start: int, end: int) -> Iterator[xplane_pb2.XLine]:
        """A line in pieces, each its own fields and the next CHUNK_BYTES of its events. A
        line that small is decoded whole: walking its events in Python costs more."""
        if end - start <= CHUNK_BYTES:
            line = _decode(xplane_pb2.XLine, self._data[start:end])
            self._count(len(line.events))
            yield line
            return
        header, chunk, events = bytearray(), bytearray(), 0
        for number, _, field_end, raw in _raw_fields(self._data, start, end):
            if number != LINE_EVENTS:
                # The fields the readers use (name, timestamp) come before the events in
                # protobuf's order; one sent after them is read with the pieces after it.
                header += self._data[raw:field_end]
                continue
            if len(chunk) + field_end - raw > CHUNK_BYTES and events:
                yield self._piece(header, chunk, events)
                chunk, events = bytearray(), 0
            chunk += self._data[raw:field_end]
            events += 1
        yield self._piece(header, chunk, events)

    def _piece(self, header: bytearray, chunk: bytearray, events: int) -> xplane_pb2.XLine:
        self._count(events)
        return _decode(xplane_pb2.XLine, header + chunk)

    def _count(self, events: int) -> None:
        self.events += events
        if self.events > self.bounds.max_events:
            raise BoundExceeded("xspace_events", f"more than {self.bounds.max_events} events")


_Decoded = TypeVar("_Decoded", xplane_pb2.XPlane, xplane_pb2.XLine)


def _decode(kind: type[_Decoded], data: Buffer | bytearray) -> _Decoded:
    try:
        return kind.FromString(bytes(data))
    except DecodeError as exc:
        raise NotASpace(f"not a profiler XSpace: {exc}") from None


def _fields(data: Buffer, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, payload start, payload end) of each length-delimited field."""
    for number, payload, field_end, _ in _raw_fields(data, start, end):
        yield number, payload, field_end


def _raw_fields(data: Buffer, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, payload start, field end, field start) of each field in data[start:end];
    for a field that is not length-delimited the payload starts after its tag."""
    at = start
    while at < end:
        raw = at
        key, at = _varint(data, at, end)
        number, wire = key >> 3, key & 7
        if wire == _LEN:
            length, at = _varint(data, at, end)
            payload, at = at, at + length
        elif wire == _VARINT:
            payload = at
            _, at = _varint(data, at, end)
        elif wire in (_FIXED64, _FIXED32):
            payload, at = at, at + (8 if wire == _FIXED64 else 4)
        else:
            raise NotASpace(f"wire type {wire} at byte {raw}")
        if at > end or number == 0:
            raise NotASpace(f"a field cut off at byte {raw}")
        yield number, payload, at, raw


def _varint(data: Buffer, at: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while at < end and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise NotASpace(f"a varint cut off at byte {at}")
