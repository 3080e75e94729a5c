"""Every command ends quietly when its reader has gone (``xmon programs | head -3``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.procs import REPO, Daemon, start_daemon

COMMANDS = [
    ["--help"],
    ["--version"],
    ["ls"],
    ["ls", "--json"],
    ["monitor", "--once"],
    ["monitor", "--period", "0.2s"],
    ["programs"],
    ["programs", "--json"],
    ["capture", "--help"],
    ["daemon", "--help"],
]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    started = start_daemon(tmp_path_factory.mktemp("pipes"))
    yield started
    started.stop()


def run_into_closed_pipe(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``xmon ARGS`` with stdout a pipe whose reader closed before it started."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "xmon", *args], stdout=write_end, stderr=subprocess.PIPE,
            env=env, cwd=REPO, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly(args: list[str], daemon: Daemon) -> None:
    env = dict(daemon.extra_env, XMON_SOCKET=str(daemon.socket_path))
    result = run_into_closed_pipe(args, env)
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), (result.returncode, result.stderr)


def test_head_closes_the_pipe_mid_stream(daemon: Daemon, tmp_path: Path) -> None:
    env = dict(daemon.extra_env, XMON_SOCKET=str(daemon.socket_path))
    result = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m xmon monitor --period 0.2s | head -c 10"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert len(result.stdout) == 10
    assert result.stderr == "", result.stderr
