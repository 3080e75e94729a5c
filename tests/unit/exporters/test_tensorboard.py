"""TensorBoard scalar export: written with tensorboard's own writer, read back with its own
EventAccumulator; run naming, failure handling and logdir retention."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from xmon.exporters import tb_logdir
from xmon.exporters.tensorboard import TensorBoardExporter, job_scalars, step_of
from xmon.model import (
    Device,
    DeviceProcess,
    Goodput,
    HardwareCounters,
    StepStats,
    Utilization,
)

from support.tb_snapshots import STARTED, Clock, job, read, snapshot


def test_scalars_read_back_with_tags_values_and_steps(tmp_path: Path) -> None:
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, clock=clock)
    exporter.update(snapshot(STARTED + 1.5, (job(in_use=1000),)))
    clock.now += 1
    exporter.update(snapshot(STARTED + 2.5, (job(in_use=3000, steps=20),)))
    exporter.close()
    acc = read(tmp_path / "train-42")
    scalars = acc.Tags()["scalars"]
    memory = acc.Scalars("memory/device_0/in_use_bytes")
    assert [(e.step, e.value) for e in memory] == [(10, 1000.0), (20, 3000.0)]  # the job's steps
    assert memory[0].wall_time == pytest.approx(STARTED + 1.5)
    assert acc.Scalars("memory/device_1/in_use_bytes")[0].value == 500.0  # CPU live arrays
    assert acc.Scalars("steps/steps_total")[-1].value == 20.0
    assert acc.Scalars("utilization/model_flops_utilization_ratio")[0].value == pytest.approx(0.4)
    assert acc.Scalars("compile/compiles_total")[0].value == 3.0
    assert acc.Scalars("captures/manual_trace_total")[0].value == 2.0
    assert acc.Scalars("utilization/hardware_flops_utilization_ratio")[0].value == pytest.approx(
        0.55
    )
    assert acc.Scalars("busy/device_0/busy_ratio")[0].value == pytest.approx(0.25)
    assert acc.Scalars("steps/inferred")[0].value == 0.0
    # missing is not zero: no bandwidth number, no limit on the CPU device
    assert "utilization/memory_bandwidth_utilization_ratio" not in scalars
    assert "memory/device_1/limit_bytes" not in scalars
    assert "busy/device_1/busy_ratio" not in scalars  # not sampled yet
    assert "utilization/flops_lower_bound" not in scalars  # no FLOPs known to qualify


def test_mfu_hfu_model_flops_and_tokens() -> None:
    u = Utilization(achieved_flops_per_second=2e12, achieved_model_flops_per_second=1.2e12,
                    model_flops_utilization_ratio=0.3, hardware_flops_utilization_ratio=0.5,
                    tokens_per_second=8192.0, flops_lower_bound=True)  # fmt: skip
    steps = StepStats(steps_total=5, inferred=True, inferred_from="jit_step")
    tags = dict(job_scalars(dataclasses.replace(job(), utilization=u, steps=steps)))
    assert tags["utilization/model_flops_utilization_ratio"] == pytest.approx(0.3)
    assert tags["utilization/hardware_flops_utilization_ratio"] == pytest.approx(0.5)
    assert tags["utilization/achieved_model_flops_per_second"] == pytest.approx(1.2e12)
    assert tags["utilization/tokens_per_second"] == 8192.0
    assert tags["utilization/flops_lower_bound"] == 1.0
    assert tags["steps/inferred"] == 1.0


def test_undeclared_model_flops_write_no_mfu() -> None:
    u = Utilization(achieved_flops_per_second=2e12, hardware_flops_utilization_ratio=0.5)
    tags = dict(job_scalars(dataclasses.replace(job(), utilization=u)))
    assert "utilization/model_flops_utilization_ratio" not in tags
    assert "utilization/tokens_per_second" not in tags
    assert tags["utilization/flops_lower_bound"] == 0.0


def test_hardware_counters_of_the_jobs_devices_only() -> None:
    mine = Device(0, "gpu", "H100", "nvml", HardwareCounters(utilization_ratio=0.9),
                  processes=(DeviceProcess(42),))  # fmt: skip
    other = Device(1, "gpu", "H100", "nvml", HardwareCounters(utilization_ratio=0.1), pids=(7,))
    tags = dict(job_scalars(job(), (mine, other)))
    assert tags["hardware/gpu_0/utilization_ratio"] == 0.9
    assert not [t for t in tags if t.startswith("hardware/gpu_1")]


def test_interval_limits_points_and_gone_jobs_are_closed(tmp_path: Path) -> None:
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=10, clock=clock)
    assert exporter.due_within(1.0)  # nothing written yet
    for i in range(5):  # 5 snapshots within 4 s: one point
        exporter.update(snapshot(STARTED + i, (job(),)))
        clock.now += 1
    assert not exporter.due_within(1.0) and exporter.due_within(6.0)  # written at 0, now 5
    clock.now += 10
    exporter.update(snapshot(STARTED + 20, ()))  # the job has gone: its writer is closed
    assert len(read(tmp_path / "train-42").Scalars("steps/steps_total")) == 1
    exporter.close()


def test_closing_writes_the_last_snapshot_the_interval_held_back(tmp_path: Path) -> None:
    """A stop lost up to an interval of every job's points: the daemon's last snapshot is
    written as the files close, once (not again if it was written already)."""
    clock = Clock()
    exporter = TensorBoardExporter(tmp_path, interval_seconds=10, clock=clock)
    exporter.update(snapshot(STARTED, (job(steps=10),)))
    clock.now += 4
    last = snapshot(STARTED + 4, (job(steps=14),))
    exporter.update(last)  # within the interval: held back
    exporter.close(last)
    points = read(tmp_path / "train-42").Scalars("steps/steps_total")
    assert [(p.step, p.value) for p in points] == [(10, 10.0), (14, 14.0)]
    again = TensorBoardExporter(tmp_path / "again", interval_seconds=10, clock=clock)
    again.update(last)
    again.close(last)  # written by update already
    assert len(read(tmp_path / "again" / "train-42").Scalars("steps/steps_total")) == 1


def test_run_names_are_safe() -> None:
    assert tb_logdir.run_name("train", 12) == "train-12"
    assert tb_logdir.run_name("../../etc/passwd", 3) == "etc_passwd-3"
    assert tb_logdir.run_name("..", 3) == "job-3"
    assert tb_logdir.run_name("a b/c\x00d", 1) == "a_b_c_d-1"
    assert tb_logdir.run_name("x" * 500, 1) == "x" * 64 + "-1"
    assert step_of(job(), STARTED - 5) == 0


def test_unwritable_logdir_marks_the_exporter_down_and_recovers(tmp_path: Path) -> None:
    clock = Clock()
    blocker = tmp_path / "logdir"
    blocker.write_text("a file where the logdir should be")
    exporter = TensorBoardExporter(blocker, interval_seconds=0, clock=clock)
    exporter.update(snapshot(STARTED + 1, (job(),)))  # must not raise
    health = exporter.health()
    assert not health.up and health.errors_total == 1 and health.target == str(blocker)
    assert health.last_error
    exporter.update(snapshot(STARTED + 2, (job(),)))
    assert exporter.health().errors_total == 1, "backs off instead of failing every tick"
    blocker.unlink()
    clock.now += 31
    exporter.update(snapshot(STARTED + 3, (job(),)))
    assert exporter.health().up
    exporter.close()
    assert read(blocker / "train-42").Scalars("steps/steps_total")


def _age(path: Path, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (stamp, stamp))


def _trace(run: Path, session: str, size: int, age: float) -> Path:
    directory = run / "plugins" / "profile" / session
    directory.mkdir(parents=True)
    (directory / "h.xplane.pb").write_bytes(b"x" * size)
    (directory / "xmon_capture.json").write_text("{}")  # xmon's note: retention may delete it
    _age(directory, age)
    return directory


def test_retention_deletes_old_then_oldest_and_keeps_open_files(tmp_path: Path) -> None:
    run = tmp_path / "train-1"
    ancient = _trace(run, "s1", 100, age=40 * 86400)
    old = _trace(run, "s2", 1000, age=3000)
    new = _trace(run, "s3", 1000, age=10)
    (run / "memory").mkdir()
    profile = run / "memory" / "p.prof"
    profile.write_bytes(b"y" * 10)
    profile.with_suffix(".json").write_text("{}")
    _age(profile, 5000)
    open_events = run / "events.out.tfevents.1.h.1.0.xmon"
    open_events.write_bytes(b"z" * 5000)
    _age(open_events, 6000)
    mine = tmp_path / "notes.txt"
    mine.write_text("not xmon's")
    removed = tb_logdir.enforce_retention(tmp_path, max_bytes=6500, max_age_seconds=30 * 86400,
                                          now=time.time(), keep=[open_events])  # fmt: skip
    # ancient: too old; then 7010 bytes are too many: the memory profile and the older trace go
    assert set(removed) == {ancient, profile, old}
    assert new.exists() and open_events.exists() and mine.exists()
    assert not profile.with_suffix(".json").exists()


def test_retention_removes_runs_it_made_left_empty_and_no_directory_of_the_user(
    tmp_path: Path,
) -> None:
    os.close(tb_logdir.open_run_dir(tmp_path, "old-1"))  # the daemon's run: it holds the note
    gone = tmp_path / "old-1"
    _trace(gone, "s1", 10, age=90000)
    users_empty = [tmp_path / "scratch", tmp_path / "train-7"]  # look-alikes of the user's
    for directory in users_empty:
        directory.mkdir()
    users_run = tmp_path / "mine-3"
    (users_run / "plugins" / "profile").mkdir(parents=True)
    (users_run / "memory").mkdir()
    for path in (gone, *users_empty, users_run):
        _age(path, 90000)
    tb_logdir.enforce_retention(tmp_path, 1, 86400, time.time())  # "full": a 1-byte budget
    assert not gone.exists()
    assert all(d.is_dir() for d in users_empty)
    assert (users_run / "plugins" / "profile").is_dir() and (users_run / "memory").is_dir()


def test_goodput_scalars_are_each_bucket_and_the_ratios() -> None:
    goodput = Goodput(100.0, (("productive", 60.0), ("compile", 40.0)), 0.6, 0.5, None, "compile")
    tags = dict(job_scalars(dataclasses.replace(job(), goodput=goodput)))
    assert tags["goodput/seconds/productive"] == 60.0
    assert tags["goodput/seconds/compile"] == 40.0
    assert (tags["goodput/wall_seconds"], tags["goodput/ratio"], tags["goodput/ratio_5m"]) == (
        100.0, 0.6, 0.5)  # fmt: skip
    assert "goodput/ratio_1h" not in tags  # no hour of history: absent, not 0
    assert not any(tag.startswith("goodput/") for tag in dict(job_scalars(job())))
