"""Snapshot -> TensorBoard scalars: one run per job, ``<logdir>/<job>-<pid>``.

Written with :mod:`xmon.exporters.tb_events` (a small synchronous event-file writer: no numpy,
no thread per file) and ``tensorboard.compat.proto`` events (no TensorFlow). The job's traces
land in the same run (``plugins/profile/``), so TensorBoard shows scalars and traces of a job
together. A scalar's step is the job's training step where it marks steps, else seconds since it
attached; it never goes back (see :mod:`xmon.exporters.tb_steps`). The job's findings are
text summaries in the same run, written when they change (:mod:`xmon.exporters.tb_findings`);
the host's findings (a runtime metrics service out of reach, a job that died out of memory)
go to a run of their own, ``<logdir>/host``, whose steps are Unix seconds.

The sink can fail (logdir not writable, disk full): the exporter then logs once, reports
itself down in ``Snapshot.exporters``, drops its writers and tries again after
``RETRY_SECONDS``; it never raises into the daemon. Retention by size and age runs every
``retention_every_seconds`` (see :mod:`xmon.exporters.tb_logdir`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2

from xmon.model import Device, ExporterHealth, Job, Snapshot

from . import tb_events, tb_findings, tb_logdir, tb_steps

log = logging.getLogger("xmon.exporters.tensorboard")

NAME = "tensorboard"
RETRY_SECONDS = 30.0
FILE_SUFFIX = ".xmon"
# Bytes of event files one job keeps: its open file is rotated at half of this and the job's
# older rotated file deleted, so a job announcing thousands of devices cannot fill the disk
# (retention never deletes an open file). 0: no bound.
JOB_MAX_BYTES = 64 * 1024 * 1024
RECORD_FRAMING = 16  # length, its CRC and the data's CRC around each event
# The host's findings belong to no job. No job's run has this name: theirs end in -<pid>.
HOST_RUN = "host"
HOST_KEY = ("", 0)  # the host run among the jobs' (job name, pid) keys; no job has pid 0


def _hardware_scalars(job: Job, devices: tuple[Device, ...]) -> list[tuple[str, float | None]]:
    out: list[tuple[str, float | None]] = []
    for device in devices:
        if job.pid not in device.pids and all(p.pid != job.pid for p in device.processes):
            continue
        h, prefix = device.hardware, f"hardware/{device.platform}_{device.index}"
        out += [
            (f"{prefix}/utilization_ratio", h.utilization_ratio),
            (f"{prefix}/duty_cycle_ratio", h.duty_cycle_ratio),
            (f"{prefix}/tensor_active_ratio", h.tensor_active_ratio),
            (f"{prefix}/memory_bandwidth_utilization_ratio", h.memory_bandwidth_utilization_ratio),
            (f"{prefix}/memory_used_bytes", h.memory_used_bytes),
            (f"{prefix}/power_watts", h.power_watts),
        ]
    return out


Raw = list[tuple[str, float | None]]


def job_scalars(job: Job, devices: tuple[Device, ...] = ()) -> list[tuple[str, float]]:
    """(tag, value) of one job at one snapshot; unknown values are left out, never 0."""
    raw = _device_scalars(job) + _hardware_scalars(job, devices) + _step_scalars(job)
    c = job.compile
    raw += [
        ("compile/compiles_total", c.compiles_total),
        ("compile/recompiles_total", c.recompiles_total),
        ("compile/backend_compile_seconds_total", c.backend_compile_seconds_total),
        ("compile/programs", len(job.programs)),
    ]
    if job.process is not None:
        raw += [
            ("process/cpu_utilization_ratio", job.process.cpu_utilization_ratio),
            ("process/resident_memory_bytes", job.process.resident_memory_bytes),
        ]
    raw += [(f"captures/{x.trigger}_{x.kind}_total", x.ok_total) for x in job.captures]
    raw += _goodput_scalars(job)
    return [(tag, float(value)) for tag, value in raw if value is not None]


def _goodput_scalars(job: Job) -> Raw:
    """The wall-time account: each bucket's seconds and the goodput ratios (docs/goodput.md)."""
    goodput = job.goodput
    if goodput is None:
        return []
    raw: Raw = [(f"goodput/seconds/{bucket}", seconds) for bucket, seconds in goodput.seconds]
    return raw + [
        ("goodput/wall_seconds", goodput.wall_seconds),
        ("goodput/ratio", goodput.ratio),
        ("goodput/ratio_5m", goodput.ratio_5m),
        ("goodput/ratio_1h", goodput.ratio_1h),
        ("goodput/restart_lost_seconds", goodput.restart_seconds),
    ]


def _device_scalars(job: Job) -> Raw:
    raw: Raw = []
    for device in job.devices:
        m, prefix = device.memory, f"memory/device_{device.info.id}"
        raw += [
            (f"{prefix}/in_use_bytes", m.in_use_bytes),
            (f"{prefix}/peak_bytes", m.peak_bytes_in_use),
            (f"{prefix}/limit_bytes", m.bytes_limit),
            (f"{prefix}/fragmentation_ratio", m.fragmentation_ratio),
            (f"busy/device_{device.info.id}/busy_ratio", device.busy_ratio),
        ]
    return raw


def _step_scalars(job: Job) -> Raw:
    """Steps and utilisation: HFU (what XLA counted as executed) and MFU (declared model FLOPs,
    absent without a declaration) side by side; 0/1 flags for inferred steps and lower bounds."""
    s, u = job.steps, job.utilization
    flops_known = s.flops_per_step is not None or u.achieved_flops_per_second is not None
    stepped = s.inferred or s.steps_total > 0
    return [
        ("steps/last_step_seconds", s.last_step_seconds),
        ("steps/p50_step_seconds", s.p50_step_seconds),
        ("steps/p90_step_seconds", s.p90_step_seconds),
        ("steps/steps_per_second", s.steps_per_second),
        ("steps/steps_total", s.counted_total),
        ("steps/inferred", s.inferred if stepped else None),
        ("utilization/hardware_flops_utilization_ratio", u.hardware_flops_utilization_ratio),
        ("utilization/model_flops_utilization_ratio", u.model_flops_utilization_ratio),
        ("utilization/memory_bandwidth_utilization_ratio", u.memory_bandwidth_utilization_ratio),
        ("utilization/achieved_flops_per_second", u.achieved_flops_per_second),
        ("utilization/achieved_model_flops_per_second", u.achieved_model_flops_per_second),
        ("utilization/tokens_per_second", u.tokens_per_second),
        ("utilization/achieved_bytes_per_second", u.achieved_bytes_per_second),
        ("utilization/flops_lower_bound", u.flops_lower_bound if flops_known else None),
        ("utilization/flops_upper_bound", u.flops_upper_bound if flops_known else None),
    ]


def scalar_event(wall_time: float, step: int, scalars: list[tuple[str, float]]) -> event_pb2.Event:
    values = [summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in scalars]
    summary = summary_pb2.Summary(value=values)
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary)


step_of = tb_steps.seconds_since_attach


class TensorBoardExporter:
    def __init__(
        self,
        logdir: Path,
        interval_seconds: float = 10.0,
        flush_seconds: float = 10.0,
        max_bytes: int = 0,
        max_age_seconds: float = 0.0,
        retention_every_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        job_max_bytes: int = JOB_MAX_BYTES,
    ) -> None:
        self.logdir = logdir
        self._job_max_bytes = job_max_bytes
        self._written: dict[tuple[str, int], int] = {}  # bytes in each job's open file
        self._rotated: dict[tuple[str, int], Path] = {}  # each job's previous file
        self.rotations_total = 0  # event files deleted at a job's bytes bound
        self._interval = interval_seconds
        self._flush_every = flush_seconds
        self._retention = (max_bytes, max_age_seconds, retention_every_seconds)
        self._clock, self._wall = clock, wall
        self._writers: dict[tuple[str, int], tb_events.EventFile] = {}
        # Each job's step axis (tb_steps): training steps or seconds advanced by the monotonic
        # clock, so a wall clock set back never makes them go back.
        self._axes: dict[tuple[str, int], tb_steps.RunAxis] = {}
        self._described: dict[tuple[str, int], Path] = {}  # the file that says the axis
        self._findings = tb_findings.FindingsText()  # what each run was told of its findings
        # Retention ages by a wall clock anchored to the monotonic one at start: a clock set
        # forward by a month must not make an hour-old trace look a month old.
        self._anchor = (wall(), clock())
        self._last_write: float | None = None
        self._written_wall: float | None = None  # the wall time of the last snapshot written
        self._last_flush = clock()
        self._last_retention: float | None = None
        self._retry_at: float | None = None
        self.errors_total = 0
        self.last_error: str | None = None
        self.steps_refused_total = 0  # points left out: their job's step was past STEP_MAX
        self._steps_refused: set[tuple[str, int]] = set()

    # -- public --------------------------------------------------------------------------------
    def update(self, snapshot: Snapshot) -> None:
        """Write this snapshot's scalars if the interval has passed; never raises."""
        now = self._clock()
        if self._retry_at is not None and now < self._retry_at:
            return
        if self._last_write is not None and now - self._last_write < self._interval:
            return
        self._last_write = now
        try:
            self._write(snapshot)
            self._written_wall = snapshot.wall_time
            if now - self._last_flush >= self._flush_every:
                self.flush()
            self._maybe_enforce_retention(now)
        except Exception as exc:  # noqa: BLE001 - any sink failure: report, back off, go on
            self._fail(exc, now)
            return
        if self._retry_at is not None:
            log.info("tensorboard export to %s works again", self.logdir)
            self._retry_at = None

    def due_within(self, seconds: float) -> bool:
        """Will ``update`` write a snapshot taken ``seconds`` from now?"""
        if self._last_write is None:
            return True
        return self._clock() + seconds - self._last_write >= self._interval

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()
        self._last_flush = self._clock()

    def close(self, final: Snapshot | None = None) -> None:
        """Flush and close every run's writer (daemon shutdown), having written ``final`` (the
        daemon's last snapshot) if the interval held it back: up to an interval of every job's
        points was lost at each stop."""
        if final is not None and final.wall_time != self._written_wall and self._retry_at is None:
            try:
                self._write(final)
            except Exception as exc:  # noqa: BLE001 - closing goes on: what was written stays
                self._fail(exc, self._clock())
        for key in list(self._writers):
            self._close(key)

    def health(self) -> ExporterHealth:
        return ExporterHealth(
            name=NAME,
            up=self._retry_at is None,
            errors_total=self.errors_total,
            last_error=self.last_error,
            target=str(self.logdir),
        )

    # -- internals -----------------------------------------------------------------------------
    def _write(self, snapshot: Snapshot) -> None:
        live = {(job.job_name, job.pid) for job in snapshot.jobs} | {HOST_KEY}
        for key in [k for k in self._writers if k not in live]:
            self._close(key)  # the job has gone: its file is complete
        self._axes = {k: v for k, v in self._axes.items() if k in live}
        self._described = {k: v for k, v in self._described.items() if k in live}
        self._written = {k: v for k, v in self._written.items() if k in live}
        self._rotated = {k: v for k, v in self._rotated.items() if k in live}
        self._steps_refused &= live
        self._findings.keep(live)
        for job in snapshot.jobs:
            scalars = job_scalars(job, snapshot.devices)
            if not scalars:
                continue
            key = (job.job_name, job.pid)
            writer = self._writer(key, tb_logdir.run_name(job.job_name, job.pid))
            step = self._step(job, snapshot, writer)
            if step is None:
                self._refuse_step(key)
                continue
            event = scalar_event(snapshot.wall_time, step, scalars)
            texts = self._findings.changes(key, job.findings, writer.path)
            writer.add_event(event)
            size = event.ByteSize() + RECORD_FRAMING
            if texts:
                text = tb_findings.text_event(snapshot.wall_time, step, texts)
                writer.add_event(text)
                size += text.ByteSize() + RECORD_FRAMING
            self._bound_job(key, writer, size)
        self._write_host_findings(snapshot)

    def _write_host_findings(self, snapshot: Snapshot) -> None:
        """The host's findings as text in the host run, when they change; no run is made for a
        host that never had one. Steps are whole Unix seconds of the clock retention ages by,
        which does not jump back while the daemon runs."""
        if HOST_KEY not in self._writers and not snapshot.findings:
            return
        writer = self._writer(HOST_KEY, HOST_RUN)
        texts = self._findings.changes(HOST_KEY, snapshot.findings, writer.path)
        if texts:
            event = tb_findings.text_event(snapshot.wall_time, int(self._now()), texts)
            writer.add_event(event)
            self._bound_job(HOST_KEY, writer, event.ByteSize() + RECORD_FRAMING)

    def _bound_job(self, key: tuple[str, int], writer: tb_events.EventFile, size: int) -> None:
        """Rotate the job's file at half its bytes bound; delete the file rotated before."""
        written = self._written[key] = self._written.get(key, 0) + size
        if not self._job_max_bytes or written < self._job_max_bytes // 2:
            return
        self._close(key)
        self._written[key] = 0
        previous, self._rotated[key] = self._rotated.get(key), writer.path
        if previous is not None:
            run_fd = tb_logdir.open_run_dir(self.logdir, previous.parent.name)
            try:
                os.unlink(previous.name, dir_fd=run_fd)  # never through a link
            except FileNotFoundError:
                pass  # retention took it already
            finally:
                os.close(run_fd)
            self.rotations_total += 1

    def _refuse_step(self, key: tuple[str, int]) -> None:
        """A job's step past STEP_MAX: its point is left out, logged once per job."""
        self.steps_refused_total += 1
        if key not in self._steps_refused:
            self._steps_refused.add(key)
            log.warning("job %r pid %d: step past %d, its TensorBoard points are left out",
                        key[0], key[1], tb_steps.STEP_MAX)  # fmt: skip

    def _step(self, job: Job, snapshot: Snapshot, writer: tb_events.EventFile) -> int | None:
        """The point's step; the run's first point once its axis is known says which axis."""
        key = (job.job_name, job.pid)
        axis = self._axes.get(key)
        if axis is None:
            axis = self._axes[key] = tb_steps.resume(job, self._last_written(job, writer))
        elif axis.started_at != job.started_at:  # restarted under the same pid: continue after
            axis = self._axes[key] = tb_steps.RunAxis(job.started_at, axis.floor, axis.floor)
        step, _ = axis.step(job, snapshot)
        if step is None:
            return None
        if axis.mode is not None and self._described.get(key) != writer.path:
            writer.add_event(tb_steps.axis_event(snapshot.wall_time, step, axis.mode))
            self._described[key] = writer.path
        return step

    def _last_written(self, job: Job, writer: tb_events.EventFile) -> tb_steps.Written:
        name = tb_logdir.run_name(job.job_name, job.pid)
        run_fd = tb_logdir.open_run_dir(self.logdir, name)  # never through a link
        try:
            return tb_steps.last_written(run_fd, FILE_SUFFIX, skip=writer.path.name)
        finally:
            os.close(run_fd)

    def _now(self) -> float:
        wall, monotonic = self._anchor
        return wall + self._clock() - monotonic

    def _writer(self, key: tuple[str, int], name: str) -> tb_events.EventFile:
        """The open event file of run ``name`` (a job's, or the host's)."""
        writer = self._writers.get(key)
        if writer is not None and writer.unlinked():
            log.warning("tensorboard: %s was deleted; writing a new event file", writer.path)
            self._close(key)
            writer = None
        if writer is None:
            run_fd = tb_logdir.open_run_dir(self.logdir, name)  # never through a link
            try:
                writer = tb_events.EventFile(
                    self.logdir / name, FILE_SUFFIX, wall=self._wall, dir_fd=run_fd
                )
            finally:
                os.close(run_fd)
            self._writers[key] = writer
        return writer

    def _close(self, key: tuple[str, int]) -> None:
        writer = self._writers.pop(key)
        try:
            writer.close()
        except Exception as exc:  # noqa: BLE001 - a writer that already failed
            log.debug("closing the tensorboard writer of %s: %r", key, exc)

    def _maybe_enforce_retention(self, now: float) -> None:
        max_bytes, max_age, every = self._retention
        if not (max_bytes or max_age):
            return
        if self._last_retention is not None and now - self._last_retention < every:
            return
        self._last_retention = now
        keep = [writer.path for writer in self._writers.values()]
        removed = tb_logdir.enforce_retention(self.logdir, max_bytes, max_age, self._now(), keep)
        if removed:
            log.info("retention removed %d item(s) from %s", len(removed), self.logdir)

    def _fail(self, exc: Exception, now: float) -> None:
        self.errors_total += 1
        message = f"{type(exc).__name__}: {exc}"
        if self._retry_at is None or message != self.last_error:  # log once per state
            log.warning("tensorboard export to %s failed: %s (retrying every %.0f s)",
                        self.logdir, message, RETRY_SECONDS)  # fmt: skip
        self.last_error = message
        self._retry_at = now + RETRY_SECONDS
        self.close()
