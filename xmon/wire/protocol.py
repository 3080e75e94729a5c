"""The wire protocol's shared rules: values moved between proto and model, and messages in parts.

The proto messages that mirror a model class use the model's field names, so conversions are
driven by the proto's own descriptor instead of hand-written field lists on both sides.

The daemon takes at most ``PART_BYTES`` (plus framing) in one gRPC message: gRPC holds each
stream's whole message before the daemon reads a byte of it, so that limit, not the largest
message, bounds what a stream can make it hold, and with the number of calls the daemon takes
at once (``max_inflight_bytes``) what all streams together can. An agent sends a larger message
(an execution sample, a program's HLO, an out-of-memory profile, a large report) as
``MessagePart``s of its bytes.
"""

from __future__ import annotations

import functools
from typing import Any

from xmon.wire.proto import xmon_pb2

# The data of one MessagePart. Small, because every call the daemon takes may hold one message
# of this size in gRPC while its last bytes are awaited: 4,096 streams at 1 MiB were 4.4 GiB.
PART_BYTES = 64 * 1024
# Room under the daemon's receive limit for a part's own fields and for whole messages of
# about a part's size: a hello (sent before the welcome says the part size; 32 arguments of at
# most 1 KiB, its devices) and small reports.
FRAMING_BYTES = 64 * 1024
RECEIVE_LIMIT_BYTES = PART_BYTES + FRAMING_BYTES
# The annotation (a TraceMe) an execution sample's agent records just after its profiler
# session starts, at a moment it also reads on its own clock (ExecutionSample.anchor_seconds):
# the XSpace's timestamps are on the profiler's clock, which no Python clock reads.
SAMPLE_ANCHOR = "xmon.sample_anchor"
# The longest an execution sample of a job that marks steps records (two begins of a 60 s step
# after a wait for the first), and the longest one a daemon takes: room for a session's start
# and stop on a loaded host.
SAMPLE_RECORD_MAX_SECONDS = 150.0
SAMPLE_TAKEN_MAX_SECONDS = SAMPLE_RECORD_MAX_SECONDS + 30.0
# The shortest a sample records (beyond whole steps): as configured at least, and where samples
# were too large for the daemon (SampleLength.max_seconds) no shorter than this.
SAMPLE_MIN_SECONDS = 0.01
# The largest execution sample (serialized XSpace) an agent sends and a daemon reads: a whole
# long step of a large program is several MiB.
SAMPLE_MAX_BYTES = 16 << 20


@functools.cache  # message classes are few and fixed; the daemon converts every report
def field_names(message_class: Any) -> tuple[str, ...]:
    return tuple(f.name for f in message_class.DESCRIPTOR.fields)


def optional_field_names(message_class: Any) -> tuple[str, ...]:
    """Fields declared ``optional``: unset on the wire means unknown (None in the model)."""
    return tuple(f.name for f in message_class.DESCRIPTOR.fields if f.has_presence)


def fields_of(source: Any, message_class: Any) -> dict[str, Any]:
    """``{name: source.name}`` for every field of ``message_class``."""
    return {name: getattr(source, name) for name in field_names(message_class)}


def in_parts(message: xmon_pb2.AgentMessage, part_bytes: int) -> list[xmon_pb2.AgentMessage]:
    """``message`` as it goes on the wire: itself when it fits in ``part_bytes`` (or when
    ``part_bytes`` is 0: a daemon that takes whole messages), else its bytes in parts."""
    if not part_bytes or message.ByteSize() <= part_bytes:
        return [message]
    data = message.SerializeToString()
    count = -(-len(data) // part_bytes)
    return [
        xmon_pb2.AgentMessage(
            part=xmon_pb2.MessagePart(
                index=i, last=i == count - 1, data=data[i * part_bytes : (i + 1) * part_bytes]
            )
        )
        for i in range(count)
    ]
