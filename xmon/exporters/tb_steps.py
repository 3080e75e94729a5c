"""The step axis of a job's TensorBoard run.

TensorBoard labels its x axis "Step", and users read it as the training step, so it is one
where the job marks steps (``StepStats.steps_total``). Inferred steps have no count, and a job
that marks none has no steps at all: there the axis is whole seconds since the job attached,
advanced by the monotonic clock (a wall clock set back never moves it back). Until a job is
known to step or not (its first step may include minutes of compiling), points sit at step 0;
after ``UNDECIDED_SECONDS`` with neither markers nor inferred steps the run takes wall time.
Which axis a run uses is written into it as a text summary (``AXIS_TAG``).

Steps never go back (TensorBoard would draw a line back): a job restarted under the same run
name continues after the last step written, and after a daemon restart the last step written is
read back from the run's newest event file of ours.
"""

from __future__ import annotations

import logging
import math
import os
import stat
import struct
from dataclasses import dataclass

from tensorboard.compat.proto import (
    event_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)

from xmon.model import Job, Snapshot

log = logging.getLogger("xmon.exporters.tensorboard")

AXIS_TAG = "xmon/step_axis"
STEPS, WALL = "steps", "wall"
UNDECIDED_SECONDS = 300.0
# No job reaches this step (285 years at a million steps a second), and an event's step is an
# int64: a job's step of 2**63 made writing its point raise, which stopped every job's points.
STEP_MAX = 2**53
READ_MAX_BYTES = 64 * 1024 * 1024  # a run's file is rotated at 32 MiB
DESCRIPTIONS = {
    STEPS: "Step axis: the job's training step (the steps it marks: xmon.step or "
    "jax.profiler.StepTraceAnnotation).",
    WALL: "Step axis: seconds since the job attached (the job marks no steps; inferred steps "
    "have no count). TensorBoard's Relative and Wall axes show the same time.",
}


def seconds_since_attach(job: Job, wall_time: float) -> int:
    """Whole seconds from the job's attach to ``wall_time``, by the wall clock; never negative."""
    origin = job.started_at if job.started_at > 0 else 0.0
    seconds = wall_time - origin
    return max(0, int(seconds)) if math.isfinite(seconds) else 0


def wanted_mode(job: Job, wall_time: float) -> str | None:
    """The axis a job's points want now; None while it is too early to tell."""
    if job.steps.inferred:
        return WALL
    if job.steps.steps_total > 0:
        return STEPS
    if seconds_since_attach(job, wall_time) >= UNDECIDED_SECONDS:
        return WALL
    return None


@dataclass
class RunAxis:
    """One job's axis in its run: ``offset`` is added to the job's own steps or seconds."""

    started_at: float
    floor: int = 0  # the last step written to the run (steps never go below it)
    offset: int = 0
    mode: str | None = None
    origin: tuple[int, float] | None = None  # (seconds since attach, monotonic) at wall start

    def step(self, job: Job, snapshot: Snapshot) -> tuple[int | None, bool]:
        """The point's step (None past STEP_MAX), and whether the axis was decided with it."""
        decided = False
        if self.mode is None:
            self.mode = wanted_mode(job, snapshot.wall_time)
            decided = self.mode is not None
        raw = self.floor
        if self.mode == STEPS:
            raw = self.offset + job.steps.steps_total
        elif self.mode == WALL:
            if self.origin is None:
                self.origin = (seconds_since_attach(job, snapshot.wall_time), snapshot.monotonic)
            since, at = self.origin
            raw = self.offset + since + max(0, int(snapshot.monotonic - at))
        if raw > STEP_MAX:
            return None, decided  # no such step: the point is not written, the axis stays
        self.floor = max(self.floor, raw)
        return self.floor, decided


@dataclass(frozen=True)
class Written:
    """What a run's newest event file of ours says: its last step, that point's wall time and
    the axis it described."""

    step: int = 0
    wall_time: float = 0.0
    mode: str | None = None


def resume(job: Job, written: Written) -> RunAxis:
    """A job's axis in a run that may hold points already: the same job's (the daemon restarted)
    go on as they were; an earlier job's (a restart under the same name) are continued after."""
    if written.wall_time <= 0:
        return RunAxis(job.started_at)
    if job.started_at > written.wall_time:  # began after the last point: a new job
        return RunAxis(job.started_at, floor=written.step, offset=written.step)
    return RunAxis(job.started_at, floor=written.step, mode=written.mode)


def axis_event(wall_time: float, step: int, mode: str) -> event_pb2.Event:
    """A text summary saying what the run's step axis is."""
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        string_val=[DESCRIPTIONS[mode].encode()],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
    )
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"),
        summary_description=DESCRIPTIONS[mode],
    )
    value = summary_pb2.Summary.Value(tag=AXIS_TAG, metadata=metadata, tensor=tensor)
    return event_pb2.Event(
        wall_time=wall_time, step=step, summary=summary_pb2.Summary(value=[value])
    )


def last_written(run_fd: int, suffix: str, skip: str = "") -> Written:
    """The newest of our event files in a run but ``skip`` (the one just opened), by this user
    and never through a link; a torn file counts as far as it can be read."""
    newest: tuple[float, str] | None = None
    for name in os.listdir(run_fd):
        if name == skip or not (name.startswith("events.out.tfevents.") and name.endswith(suffix)):
            continue
        try:
            st = os.stat(name, dir_fd=run_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            newest = max(newest or (st.st_mtime, name), (st.st_mtime, name))
    if newest is None:
        return Written()
    try:
        fd = os.open(newest[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run_fd)
        with os.fdopen(fd, "rb") as f:
            data = f.read(READ_MAX_BYTES)
    except OSError as exc:
        log.debug("reading the last step of %s: %r", newest[1], exc)
        return Written()
    return parse_written(data)


def parse_written(data: bytes) -> Written:
    """Last summary step, its wall time and the axis text in TFRecord-framed events."""
    step, wall, mode, at = 0, 0.0, None, 0
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        record = data[at + 12 : at + 12 + length]
        at += 12 + length + 4
        if len(record) < length or at > len(data):
            break  # torn at the end (the daemon died mid-write)
        event = event_pb2.Event()
        try:
            event.ParseFromString(record)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError; stop at a damaged record
            break
        if not event.HasField("summary"):
            continue
        if event.step >= step:
            step, wall = event.step, event.wall_time
        for value in event.summary.value:
            if value.tag == AXIS_TAG and value.tensor.string_val:
                text = value.tensor.string_val[0].decode(errors="replace")
                mode = next((m for m, d in DESCRIPTIONS.items() if d == text), mode)
    return Written(step, wall, mode)
