"""The daemon's malloc settings: applied on glibc, harmless elsewhere."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from support.procs import start_daemon

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_arena_cap_applies_before_threads_and_trim_releases_freed_pages() -> None:
    script = (
        "from xmon.daemon import memory\n"
        "assert memory.limit_arenas()\n"
        "blocks = [bytearray(4096) for _ in range(20000)]\n"
        "del blocks\n"
        "print(memory.trim())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def _event_polls(tmp_path: Path, env: dict[str, str] | None = None) -> int:
    """How many epoll instances a real ``xmon daemon`` holds once it serves."""
    daemon = start_daemon(tmp_path, env=env)
    try:
        fds = Path(f"/proc/{daemon.popen.pid}/fd")
        return sum(_link(fd) == "anon_inode:[eventpoll]" for fd in fds.iterdir())
    finally:
        daemon.stop()


def _link(fd: Path) -> str:
    """What a descriptor refers to; "" for one the daemon closed since it was listed."""
    try:
        return os.readlink(fd)
    except FileNotFoundError:
        return ""


@pytest.mark.skipif(sys.platform != "linux", reason="gRPC's epoll poller is Linux's")
@pytest.mark.skipif("GRPC_POLL_STRATEGY" in os.environ, reason="a poller is chosen for all")
def test_a_real_daemon_serves_its_socket_without_grpc_s_epoll_poller(tmp_path: Path) -> None:
    """epoll1 keeps every connection's descriptor state after it closes (docs/reliability.md):
    a daemon left to its default holds only asyncio's epoll instances, not gRPC's too."""
    default = _event_polls(tmp_path / "default")
    with_epoll = _event_polls(tmp_path / "epoll1", {"GRPC_POLL_STRATEGY": "epoll1"})
    assert default < with_epoll, (default, with_epoll)
