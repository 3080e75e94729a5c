"""What agents send, made the daemon's model objects once, where it arrives.

Each message an agent sends is read here and nowhere else: what the daemon keeps of it is
cleaned (labels bounded, non-finite numbers dropped) and cut to the job's bounds on the way, so
that job state, the tick, detectors and exporters read plain frozen dataclasses and never a
protobuf message.
"""

from __future__ import annotations

from xmon.execution.samples import MAX_STEP_BEGINS, ExecutionSample
from xmon.wire.proto import xmon_pb2


def sample_of(message: xmon_pb2.ExecutionSample) -> ExecutionSample:
    """An execution sample; its step begins are taken up to one past what a sample may hold,
    enough for the reader to refuse it without a copy of all of them."""
    return ExecutionSample(
        started_at=message.started_at,
        duration_seconds=message.duration_seconds,
        xspace=message.xspace,
        step_begin_seconds=tuple(message.step_begin_seconds[: MAX_STEP_BEGINS + 1]),
        steps_marked=message.steps_marked,
        anchor_seconds=message.anchor_seconds if message.HasField("anchor_seconds") else None,
    )
