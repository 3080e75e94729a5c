"""``xmon demo``, the README's first command, run as a newcomer runs it: a daemon and a JAX job on
4 CPU devices with live metrics, found by ``xmon ls`` / ``xmon monitor`` from another shell
that sets nothing, and stopped cleanly."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from xmon.cli.demo import demo_socket

from support.procs import REPO


def xmon(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xmon", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_demo_beside_a_running_daemon_uses_a_socket_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("XMON_SOCKET", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    default = tmp_path / "run" / "xmon" / "xmon.sock"
    default.parent.mkdir(parents=True)
    own = tmp_path / "demo" / "xmon.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other_daemon:
        other_daemon.bind(str(default))
        other_daemon.listen()
        assert demo_socket(None, own.parent) == (own, False)
    # That daemon has gone and left its socket file: the default is free again.
    assert default.exists()
    assert demo_socket(None, own.parent) == (default, True)
    assert demo_socket(str(own), own.parent) == (own, False)
