"""A root daemon refuses a runtime directory another user controls: whoever can write it can
swap the socket under the daemon's agents."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from attack import Attacker

from support.procs import base_env, spawn

pytestmark = pytest.mark.e2e


def _start(tmp_path: Path, socket_path: Path) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "xmon", "daemon", "--listen", "127.0.0.1:0",
           "--socket", str(socket_path)]  # fmt: skip
    proc = spawn(cmd, tmp_path / "d.log", base_env(XMON_LOGDIR=str(tmp_path / "tb")))
    proc.popen.wait(30)
    return int(proc.popen.returncode), proc.log()


@pytest.mark.parametrize("mode", [0o777, 0o755])
def test_a_socket_directory_another_user_made_is_refused(
    shared_tmp: Path, attacker: Attacker, tmp_path: Path, mode: int
) -> None:
    os.chmod(shared_tmp, 0o1777)  # like /tmp: anyone may make a directory in it
    directory = shared_tmp / "xmon-1002"
    assert attacker.run("mkdir", "-m", oct(mode)[2:], str(directory)).returncode == 0
    code, log = _start(tmp_path, directory / "xmon.sock")
    assert code == 1 and "refusing socket directory" in log and "Traceback" not in log, log
    assert log.count("\n") == 1, log
    assert list(directory.iterdir()) == []


def test_a_world_writable_socket_directory_is_refused_even_if_root_owns_it(
    shared_tmp: Path, tmp_path: Path
) -> None:
    directory = shared_tmp / "open"
    directory.mkdir()
    os.chmod(directory, 0o777)
    code, log = _start(tmp_path, directory / "xmon.sock")
    assert code == 1 and "writable by every user" in log, log
