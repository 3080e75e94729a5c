"""What agents send, made model objects once at the daemon's intake (xmon.daemon.intake.convert):
cleaned and cut to the job's bounds there, so that nothing past it reads a protobuf message."""

from __future__ import annotations

from xmon.daemon.intake.convert import sample_of
from xmon.execution.samples import MAX_STEP_BEGINS, ExecutionSample
from xmon.wire.proto import xmon_pb2


def test_an_execution_sample_keeps_its_numbers_and_bytes() -> None:
    message = xmon_pb2.ExecutionSample(
        started_at=1.7e9, duration_seconds=0.2, xspace=b"space", step_begin_seconds=[0.05, 0.1],
        steps_marked=True, anchor_seconds=0.001,
    )  # fmt: skip
    assert sample_of(message) == ExecutionSample(
        1.7e9, 0.2, b"space", (0.05, 0.1), steps_marked=True, anchor_seconds=0.001
    )
    assert sample_of(xmon_pb2.ExecutionSample()).anchor_seconds is None  # unset: unknown


def test_a_sample_s_step_begins_are_taken_no_further_than_its_refusal_needs() -> None:
    message = xmon_pb2.ExecutionSample(step_begin_seconds=[0.0] * 100_000)
    assert len(sample_of(message).step_begin_seconds) == MAX_STEP_BEGINS + 1
