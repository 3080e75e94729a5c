"""A config path that is not a config file: one line and exit 2, never a hang or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.procs import base_env


def _daemon(config: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "xmon", "daemon", "--config", config, "--listen", "127.0.0.1:0",
           "--socket", str(tmp_path / "x.sock")]  # fmt: skip
    return subprocess.run(cmd, env=base_env(XMON_LOGDIR=str(tmp_path / "tb")),
                          capture_output=True, text=True, timeout=30)  # fmt: skip


def _nested(tmp_path: Path) -> str:
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    return str(path)


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return str(path)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_nested, "nested too deeply"),
        (_fifo, "is not a regular file"),
        (lambda tmp_path: "/dev/zero", "is not a regular file"),
        (lambda tmp_path: str(tmp_path), "Is a directory"),
    ],
    ids=["nested", "fifo", "dev-zero", "directory"],
)
def test_one_line_and_exit_2(tmp_path: Path, make: object, message: str) -> None:
    result = _daemon(make(tmp_path), tmp_path)  # type: ignore[operator]
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr[-2000:]


@pytest.mark.e2e
def test_a_huge_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text("# padding\n" * 200_000)
    result = _daemon(str(path), tmp_path)
    assert result.returncode == 2 and "larger than" in result.stderr, result.stderr
