"""The TensorBoard step axis: the job's training step where it marks steps, else seconds since
it attached; said in the run; never back, across job and daemon restarts. Read back with
tensorboard's own EventAccumulator."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from xmon.exporters import tb_steps
from xmon.exporters.tb_events import frame
from xmon.exporters.tensorboard import TensorBoardExporter
from xmon.model import Job, StepStats

from support.tb_snapshots import STARTED, Clock, job, read, snapshot

TAG = "steps/steps_total"
INFERRED = "steps/inferred"  # inferred steps have no count: their points are found by this


def _stepped(steps: int, started: float = STARTED) -> Job:
    return dataclasses.replace(job(steps=steps), started_at=started)


def _inferred(started: float = STARTED) -> Job:
    return dataclasses.replace(job(), started_at=started, steps=StepStats(inferred=True))


def _unmarked() -> Job:
    return dataclasses.replace(job(), steps=StepStats())


def _write(logdir: Path, points: list[tuple[float, Job]]) -> None:
    """One exporter (one daemon's life) writing a point per (seconds after STARTED, job)."""
    clock = Clock()
    wall = lambda: STARTED + clock.now - 100.0  # noqa: E731 - file names in order of writing
    exporter = TensorBoardExporter(logdir, interval_seconds=0, clock=clock, wall=wall)
    for at, one in points:
        clock.now = 100.0 + at
        exporter.update(dataclasses.replace(snapshot(STARTED + at, (one,)), monotonic=clock.now))
    exporter.close()


def _steps(logdir: Path, tag: str = TAG) -> list[int]:
    return [e.step for e in read(logdir / "train-42").Scalars(tag)]


def _axis_text(logdir: Path) -> str:
    acc = read(logdir / "train-42")
    return acc.SummaryMetadata(tb_steps.AXIS_TAG).summary_description


def test_marked_steps_are_the_axis_and_the_run_says_so(tmp_path: Path) -> None:
    _write(tmp_path, [(30.0, _stepped(1)), (40.0, _stepped(180)), (50.0, _stepped(375))])
    assert _steps(tmp_path) == [1, 180, 375]
    assert "training step" in _axis_text(tmp_path)
    tensor = read(tmp_path / "train-42").Tensors(tb_steps.AXIS_TAG)[0]
    assert b"training step" in tensor.tensor_proto.string_val[0]


def test_inferred_steps_have_no_count_so_the_axis_is_seconds(tmp_path: Path) -> None:
    _write(tmp_path, [(30.4, _inferred()), (40.6, _inferred()), (51.0, _inferred())])
    assert _steps(tmp_path, INFERRED) == [30, 40, 50]  # advanced by the monotonic clock from 30
    assert TAG not in read(tmp_path / "train-42").Tags()["scalars"]  # no count, not a 0
    assert "seconds since the job attached" in _axis_text(tmp_path)


def test_points_wait_at_zero_until_the_job_steps_then_wall_time(tmp_path: Path) -> None:
    _write(tmp_path, [(5.0, _unmarked()), (60.0, _unmarked()), (70.0, _stepped(4))])
    assert _steps(tmp_path) == [0, 0, 4]  # a long first step (compiling) stays at 0
    late = tb_steps.UNDECIDED_SECONDS
    _write(tmp_path / "b", [(5.0, _unmarked()), (late + 1, _unmarked()), (late + 11, _unmarked())])
    assert _steps(tmp_path / "b") == [0, int(late) + 1, int(late) + 11]


def test_a_job_restarted_under_the_same_run_continues_after_its_last_step(tmp_path: Path) -> None:
    again = STARTED + 100
    _write(tmp_path, [(30.0, _stepped(500)), (101.0, _stepped(0, again)),
                      (110.0, _stepped(20, again))])  # fmt: skip
    assert _steps(tmp_path) == [500, 500, 520]


def test_a_daemon_restart_mid_job_keeps_the_axis(tmp_path: Path) -> None:
    _write(tmp_path, [(30.0, _stepped(100)), (40.0, _stepped(200))])
    _write(tmp_path, [(60.0, _stepped(400)), (70.0, _stepped(500))])  # the same job goes on
    assert _steps(tmp_path) == [100, 200, 400, 500]
    _write(tmp_path / "w", [(30.0, _inferred()), (40.0, _inferred())])
    _write(tmp_path / "w", [(60.0, _inferred()), (70.0, _inferred())])
    assert _steps(tmp_path / "w", INFERRED) == [30, 40, 60, 70]


def test_a_job_restarted_while_the_daemon_was_down_continues_after(tmp_path: Path) -> None:
    _write(tmp_path, [(30.0, _stepped(100)), (40.0, _stepped(900))])
    again = STARTED + 50  # began after the last point written
    _write(tmp_path, [(60.0, _stepped(3, again)), (70.0, _stepped(10, again))])
    steps = _steps(tmp_path)
    assert steps == [100, 900, 903, 910] and steps == sorted(steps)


def test_a_torn_event_file_is_read_as_far_as_it_goes() -> None:
    event = tb_steps.axis_event(STARTED, 7, tb_steps.STEPS)
    data = frame(event.SerializeToString())
    assert tb_steps.parse_written(data + data[:9]) == tb_steps.Written(7, STARTED, tb_steps.STEPS)
