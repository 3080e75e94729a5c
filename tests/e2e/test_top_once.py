"""``xmon top --once``: one frame of the view as text from a real daemon, without a terminal,
for every job or the one ``--job`` names; a clear one-line error otherwise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.flood_attacks import RawStream, hello, report
from support.procs import base_env, start_daemon, wait_for


def top_once(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xmon", "top", "--once", "--socket", str(socket), *args],
        capture_output=True, text=True, timeout=60, env=base_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_one_frame_of_every_job_or_of_the_one_named(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "d", env={"XMON_VERIFY_PIDS": "off"})
    jobs = [RawStream(daemon.socket_path, [hello(pid, devices=2), report(devices=2)],
                      keepalive=0.5) for pid in (4101, 4102)]  # fmt: skip
    try:
        wait_for(lambda: 'pid="4102"' in daemon.scrape() and 'pid="4101"' in daemon.scrape(),
                 30, "both jobs")  # fmt: skip
        every = top_once(daemon.socket_path)
        assert every.returncode == 0, every.stderr
        assert "DEVICE" in every.stdout and "STEPS" in every.stdout
        assert "flood4101" in every.stdout and "flood4102" in every.stdout
        assert "\x1b[" not in every.stdout  # plain text: a pipe gets no escapes
        one = top_once(daemon.socket_path, "--job", "4102")
        assert one.returncode == 0 and "flood4102" in one.stdout, one.stderr
        assert "flood4101" not in one.stdout
        missing = top_once(daemon.socket_path, "--job", "nosuch")
        assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
        assert "no attached job is 'nosuch'" in missing.stderr
    finally:
        for job in jobs:
            job.close()
        daemon.stop()


def test_no_daemon_is_one_line(tmp_path: Path) -> None:
    result = top_once(tmp_path / "absent.sock")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "no xmon daemon is answering" in result.stderr
