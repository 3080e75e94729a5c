"""``xmon demo``, the README's first command, run as a newcomer runs it: a daemon and a JAX job on
4 CPU devices with live metrics, found by ``xmon ls`` / ``xmon monitor`` from another shell
that sets nothing, and stopped cleanly."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from support.procs import REPO, base_env, free_port, spawn, wait_for


def shell_env(home: Path) -> dict[str, str]:
    """A user's shell: no XMON_* settings, its own runtime and state directories."""
    return base_env(XDG_RUNTIME_DIR=str(home / "run"), XDG_STATE_HOME=str(home / "state"))


def xmon(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xmon", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


MEMORY = r'^xmon_job_device_memory_in_use_bytes\{device="(\d)"'


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


# Ctrl-C reaches a terminal's foreground job: SIGINT at its default, whatever this test's
# runner inherited (a CI started in the background ignores it, and so would the demo, rightly:
# tests/e2e/test_demo_lifecycle.py).
AS_IN_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.mark.slow(40)
def test_demo_shows_live_metrics_and_another_shell_finds_it(tmp_path: Path) -> None:
    env = shell_env(tmp_path)
    port = free_port()
    demo = spawn(
        [sys.executable, "-c", AS_IN_A_TERMINAL, "-m", "xmon", "demo",
         "--listen", f"127.0.0.1:{port}"],
        tmp_path / "demo.log", env,
    )  # fmt: skip
    try:

        def stepping() -> str | None:
            assert demo.alive(), demo.log()
            text = scrape(port)
            steps = re.search(r"^xmon_job_steps_per_second\{.*\} (\S+)$", text, re.M)
            # the first memory reading is taken at rest between steps, a moment after they start
            memory = re.findall(MEMORY, text, re.M)
            return text if steps and float(steps.group(1)) > 0 and len(memory) == 4 else None

        text = wait_for(stepping, 120, "the demo job stepping, with its memory, in /metrics")
        assert sorted(re.findall(MEMORY, text, re.M)) == ["0", "1", "2", "3"]
        mfu = re.search(r"^xmon_job_model_flops_utilization_ratio\{.*\} (\S+)$", text, re.M)
        assert mfu and float(mfu.group(1)) > 0, "the demo declares a CPU peak, so MFU shows"

        log = demo.log()
        assert "XMON_SOCKET" not in log, "the views need no setting to find the demo"
        assert "xmon top" in log and "xmon monitor" in log
        report = json.loads(xmon("monitor", "--once", env=env).stdout)
        assert [job["job_name"] for job in report["jobs"]] == ["demo"]
        listing = xmon("ls", env=env)
        assert listing.returncode == 0 and "no TPU/GPU found" in listing.stdout
    finally:
        code = demo.stop(signal.SIGINT, timeout=30)
    log = demo.log()
    assert code in (0, -signal.SIGINT, 130), log
    assert "Traceback" not in log
    assert not (tmp_path / "run" / "xmon" / "xmon.sock").exists(), "the socket is left behind"


def test_demo_with_a_busy_metrics_port_says_so(tmp_path: Path) -> None:
    env = shell_env(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = xmon("demo", "--listen", f"127.0.0.1:{port}", "--steps", "10", env=env)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert str(port) in result.stderr and "xmon demo: the daemon did not start" in result.stderr
