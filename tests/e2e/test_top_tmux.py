"""``xmon top`` for real: in tmux, against a real daemon and the demo JAX job on 4 CPU devices,
reading the screen with ``tmux capture-pane``; a trace through the capture key; then the daemon
goes away and comes back."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from support.procs import base_env, start_daemon, wait_for
from support.tmux import Tmux, shows
from support.views import start_demo

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]


def test_top_in_tmux_against_the_demo_job_and_a_daemon_that_restarts(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    job = start_demo(tmp_path / "job", daemon.socket_path, devices=4)
    tmux = Tmux(tmp_path / "tmux.sock")
    top = [sys.executable, "-m", "xmon", "top", "--socket", str(daemon.socket_path),
           "--trace-seconds", "1"]  # fmt: skip
    command = f"{shlex.join(top)}; echo xmon-top-exit=$?; sleep 600"
    try:
        tmux.start(command, dict(base_env(), TERM="xterm-256color"))
        devices = [rf"cpu {i}\s+cpu\s+demo" for i in range(4)]
        screen = wait_for(
            lambda: shows(tmux, r"demo", r"1 job\b", r"4 devices", *devices), 120,
            "xmon top to show the demo job and its 4 devices",
        )  # fmt: skip
        # the mark column (a finding of the job: i for setup notes) sits between JOB and DEV
        assert re.search(rf"\b{job.popen.pid}\s+demo\s+(?:[!‼i]\s+)?4\b", screen), screen
        tmux.keys("t")  # a real trace through the daemon's capture call
        wait_for(lambda: shows(tmux, rf"trace of pid {job.popen.pid} captured"), 120, "a trace")
        daemon.stop()
        wait_for(lambda: shows(tmux, "daemon not reachable at"), 60, "the lost state")
        daemon = start_daemon(tmp_path / "daemon")  # a new daemon on the same socket
        try:
            wait_for(lambda: shows(tmux, "● connected", rf"\b{job.popen.pid}\s+demo\b"), 120,
                     "top and the job's agent to reconnect")  # fmt: skip
        except AssertionError as missed:
            raise AssertionError(
                f"{missed}\nscreen:\n{tmux.screen()}\njob:\n"
                f"{job.log()[-3000:]}\ndaemon:\n{daemon.log()[-3000:]}"
            ) from None
        tmux.keys("q")
        final = wait_for(lambda: shows(tmux, r"xmon-top-exit=\d+"), 30, "xmon top to exit")
        assert "xmon-top-exit=0" in final and "Traceback" not in final, final
    finally:
        tmux.close()
        job.stop()
        daemon.stop()
