"""The daemon's out-of-memory files: written into the job's run directory without following
links and without overwriting anything (the run directory may belong to the job's user)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from xmon.daemon import oom
from xmon.daemon.intake.convert import oom_of
from xmon.daemon.received import OomReport
from xmon.exporters import tb_logdir
from xmon.wire.proto import xmon_pb2


def _report() -> OomReport:
    """A report as the daemon's intake hands it to the sink."""
    report = xmon_pb2.OomReport(wall_time=1.7e9, error="JaxRuntimeError: RESOURCE_EXHAUSTED")
    report.largest_arrays.add(shape=[4, 4], dtype="float32", nbytes=64).device_bytes[0] = 64
    report.memory_profile = gzip.compress(b"\x0a\x00", mtime=0)  # the same bytes every call
    return oom_of(report)


def test_two_reports_in_one_second_get_files_of_their_own(tmp_path: Path) -> None:
    first = oom.save(tmp_path, "train", 42, "host", _report())
    second = oom.save(tmp_path, "train", 42, "host", _report())
    assert len(first) == len(second) == 2 and not set(first) & set(second)
    assert Path(second[0]).name.endswith("-1.json")
    body = json.loads(Path(first[0]).read_text())
    assert body["pid"] == 42 and "memory_profile" not in body
    assert body["largest_arrays"][0]["device_bytes"] == {"0": "64"}
    assert Path(first[1]).read_bytes() == _report().memory_profile


def test_a_link_in_the_run_directory_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "logdir" / tb_logdir.run_name("train", 42)
    run.mkdir(parents=True)
    os.symlink(elsewhere, run / oom.DIRECTORY)
    with pytest.raises(OSError):
        oom.save(tmp_path / "logdir", "train", 42, "host", _report())
    assert list(elsewhere.iterdir()) == []


def test_a_planted_file_is_not_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text("keep")
    stem = tb_logdir.memory_profile_path(Path(), 1.7e9, "host").stem
    directory = tmp_path / tb_logdir.run_name("train", 42) / oom.DIRECTORY
    directory.mkdir(parents=True)
    os.symlink(target, directory / f"{stem}.json")
    paths = oom.save(tmp_path, "train", 42, "host", _report())
    assert target.read_text() == "keep" and Path(paths[0]).name == f"{stem}-1.json"
