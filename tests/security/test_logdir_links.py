"""A root daemon's TensorBoard logdir holds run directories that job users own: nothing a job
user plants there (links, look-alike files) may turn the daemon's writes or its retention
against files outside the logdir or against files xmon did not write."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import pytest
from attack import Attacker

from xmon.exporters import tb_logdir
from xmon.exporters.tensorboard import TensorBoardExporter
from xmon.model import StepStats

from support.tb_snapshots import STARTED, Clock, job, read, snapshot

MONTH = 30 * 86400


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (stamp, stamp), follow_symlinks=False)


def _victim(base: Path) -> Path:
    """A root-owned directory outside the logdir, shaped like trace sessions, 40 days old."""
    victim = base / "root-data"
    for name in ("2020_01_01_00_00_00", "keep-me"):
        (victim / name).mkdir(parents=True)
        (victim / name / "xmon_capture.json").write_text("{}")  # even xmon-looking files
        (victim / name / "data.bin").write_bytes(b"precious")
    (victim / "a.prof").write_bytes(b"p")
    (victim / "a.json").write_text("{}")
    _age(victim, 40 * 86400)
    return victim


def _job_run(logdir: Path, attacker: Attacker) -> Path:
    logdir.mkdir(mode=0o755, exist_ok=True)
    run = logdir / "train-42"
    run.mkdir()
    attacker.own(run)  # the job's user owns its run directory (it writes its traces there)
    return run


@pytest.mark.e2e
def test_retention_never_follows_links_planted_in_a_run(
    shared_tmp: Path, attacker: Attacker
) -> None:
    victim = _victim(shared_tmp)
    logdir = shared_tmp / "tb"
    run = _job_run(logdir, attacker)
    for cmd in (["mkdir", "-p", "plugins", "elsewhere/plugins"],
                ["ln", "-s", str(victim), "plugins/profile"],  # the whole profile directory
                ["ln", "-s", str(victim), "memory"],
                ["mkdir", "-p", "elsewhere/plugins/profile"],
                ["ln", "-s", str(victim / "keep-me"),
                 "elsewhere/plugins/profile/2020_01_01_00_00_01"]):  # fmt: skip
        assert attacker.run(*cmd, cwd=run).returncode == 0
    attacker.run("ln", "-s", str(victim), str(logdir / "linked-1"))  # fails: logdir is root's
    shutil.copytree(run / "elsewhere", logdir / "other-7", symlinks=True)  # a session link
    _age(run, 40 * 86400)

    removed = tb_logdir.enforce_retention(logdir, 1, MONTH, time.time())

    assert removed == []
    assert sorted(p.name for p in victim.iterdir()) == [
        "2020_01_01_00_00_00", "a.json", "a.prof", "keep-me"
    ]  # fmt: skip
    assert (victim / "keep-me" / "data.bin").read_bytes() == b"precious"


def test_retention_deletes_only_what_xmon_wrote(tmp_path: Path) -> None:
    run = tmp_path / "train-42"
    theirs = run / "plugins" / "profile" / "2020_01_01_00_00_00"  # the user's own trace
    ours = run / "plugins" / "profile" / "2020_01_01_00_00_01"
    for session in (theirs, ours):
        session.mkdir(parents=True)
        (session / "h.xplane.pb").write_bytes(b"x")
    (ours / "xmon_capture.json").write_text("{}")
    (run / "events.out.tfevents.1.h.1.0").write_bytes(b"their scalars")
    (run / "events.out.tfevents.1.h.1.1.xmon").write_bytes(b"ours")
    _age(run, 40 * 86400)
    removed = tb_logdir.enforce_retention(tmp_path, 0, MONTH, time.time())
    assert sorted(p.name for p in removed) == [
        "2020_01_01_00_00_01", "events.out.tfevents.1.h.1.1.xmon"
    ]  # fmt: skip
    assert theirs.exists() and (run / "events.out.tfevents.1.h.1.0").exists()


@pytest.mark.e2e
def test_scalars_are_never_written_through_a_linked_run_directory(
    shared_tmp: Path, attacker: Attacker
) -> None:
    target = shared_tmp / "root-only"
    target.mkdir(mode=0o700)
    logdir = shared_tmp / "tb"
    logdir.mkdir()
    os.chmod(logdir, 0o1777)  # jobs can create their runs (sticky: not delete others')
    assert attacker.run("ln", "-s", str(target), str(logdir / "train-42")).returncode == 0
    exporter = TensorBoardExporter(logdir, interval_seconds=0, clock=Clock())
    exporter.update(snapshot(STARTED + 1, (job(),)))
    exporter.close()
    assert list(target.iterdir()) == []
    health = exporter.health()
    assert not health.up and "a link or not a directory" in (health.last_error or "")


def test_a_deleted_run_directory_or_logdir_is_noticed_and_written_again(tmp_path: Path) -> None:
    logdir, clock = tmp_path / "tb", Clock()
    exporter = TensorBoardExporter(logdir, interval_seconds=0, clock=clock)
    exporter.update(snapshot(STARTED + 1, (job(steps=1),)))
    exporter.flush()
    shutil.rmtree(logdir)  # an operator's clean-up, or a tmpfiles rule
    clock.now += 1
    exporter.update(snapshot(STARTED + 2, (job(steps=2),)))
    exporter.close()
    assert exporter.health().up
    assert [e.value for e in read(logdir / "train-42").Scalars("steps/steps_total")] == [2.0]


def test_steps_stay_monotonic_when_the_wall_clock_goes_back(tmp_path: Path) -> None:
    """A job with inferred steps: its axis is seconds since it attached."""
    inferred = dataclasses.replace(job(), steps=StepStats(steps_total=0, inferred=True))
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, clock=Clock())
    first = snapshot(STARTED + 10, (inferred,))
    exporter.update(first)
    back = dataclasses.replace(first, wall_time=STARTED + 10 - 3600, monotonic=first.monotonic + 5)
    exporter.update(back)
    exporter.close()
    # inferred steps have no count: their points are found by the inferred flag
    steps = [e.step for e in read(tmp_path / "train-42").Scalars("steps/inferred")]
    assert steps == [10, 15]


def test_retention_ages_by_a_clock_that_does_not_jump(tmp_path: Path) -> None:
    """The wall clock jumps 31 days forward: an hour-old trace is still an hour old."""
    session = tmp_path / "train-42" / "plugins" / "profile" / "2020_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "xmon_capture.json").write_text("{}")
    _age(session, 3600)
    clock, jump = Clock(), [0.0]
    exporter = TensorBoardExporter(tmp_path, interval_seconds=0, max_age_seconds=MONTH,
                                   clock=clock, wall=lambda: time.time() + jump[0])  # fmt: skip
    jump[0] = 31 * 86400
    clock.now += 1
    exporter.update(snapshot(time.time(), (job(),)))
    exporter.close()
    assert session.exists()
