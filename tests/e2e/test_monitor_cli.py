"""``xmon monitor`` as a command: flags and config file, period gating, and the real thing
against a real daemon and the demo JAX job on 4 CPU devices."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema

from support.procs import Daemon, base_env, start_daemon, wait_for
from support.views import start_demo

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "monitor.schema.json").read_text()
)


# --- the command against a real daemon -------------------------------------------------------


def xmon(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "xmon", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=base_env())


def test_no_daemon_is_one_clear_line_and_exit_1(tmp_path: Path) -> None:
    result = xmon("monitor", "--once", "--socket", str(tmp_path / "absent.sock"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("xmon monitor: no xmon daemon is answering on ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_flag_is_a_clear_error(tmp_path: Path) -> None:
    result = xmon("monitor", "--groups", "gpu", "--socket", str(tmp_path / "absent.sock"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "xmon monitor: --groups: unknown group 'gpu' (known: system, hardware, jobs, programs)"
    )


class Lines:
    """A running `xmon monitor`, its stdout lines read by a thread (so reads can time out)."""

    def __init__(self, *argv: str) -> None:
        cmd = [sys.executable, "-m", "xmon", "monitor", *argv]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=base_env())  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def next(self, timeout: float = 60) -> dict[str, Any]:
        return json.loads(self.lines.get(timeout=timeout))

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=20)
        return err


def test_every_line_validates_and_lists_every_device_of_the_demo_job(
    daemon: Daemon, tmp_path: Path
) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    job = start_demo(tmp_path / "job", daemon.socket_path, devices=4)
    stream = Lines("--socket", str(daemon.socket_path), "--period", "1")
    try:
        seen: list[dict[str, Any]] = []

        def stepping_report() -> dict[str, Any] | None:
            report = stream.next()
            errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(report)]
            assert not errors, errors[:5]
            seen.append(report)
            jobs = report["jobs"]
            delta = jobs[0]["steps"]["delta"] if jobs else None
            if not (delta and delta["steps"] > 0):
                return None
            # A reading of live buffers stands until the next one (paced by its cost): the
            # first report of the job stepping may still carry one taken before the job put
            # its replicas on devices 1-3, truthfully 0 there, with its read_at.
            memory = [d["memory"].get("live_array_bytes") for d in jobs[0]["devices"]]
            return report if all(m is not None and m > 0 for m in memory) else None

        report = wait_for(
            stepping_report, 120, "a report of the demo job stepping, memory on every device", 0
        )
    finally:
        err = stream.stop()
        job.stop()
    assert "Traceback" not in err
    demo = report["jobs"][0]
    assert demo["job_name"] == "demo" and demo["platform"] == "cpu"
    assert [d["id"] for d in demo["devices"]] == [0, 1, 2, 3]
    assert all(d["memory"]["live_array_bytes"] > 0 for d in demo["devices"])
    assert demo["programs"]["count"] > 0 and demo["programs"]["items"]
    assert report["system"]["cpu_count"] >= 1
    # --period 1 over a 0.5 s daemon: snapshots are skipped, never a report every 0.5 s
    # (a loaded daemon may tick late, so the upper side is not pinned).
    periods = [r["period_seconds"] for r in seen[1:]]
    assert periods and all(p >= 0.74 for p in periods), periods


def test_once_with_filters_and_a_closed_pipe(daemon: Daemon) -> None:
    socket = str(daemon.socket_path)
    result = xmon("monitor", "--once", "--socket", socket, "--groups", "jobs")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["jobs"] == [] and "system" not in report and "hardware" not in report
    assert len(result.stdout.splitlines()) == 1
    # A job that is not there is an error, as in `xmon programs --job nope`.
    result = xmon("monitor", "--once", "--socket", socket, "--job", "nope")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "xmon monitor: no attached job matches --job nope; attached: none\n"
    # `xmon monitor | head -1`: the reader goes away, monitor exits quietly and with 0.
    pipeline = f"set -o pipefail; {sys.executable} -m xmon monitor --socket {socket} | head -1"
    piped = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True,
                           timeout=60, env=base_env())  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["seq"] >= 1
    assert piped.stderr == ""


def test_a_running_monitor_survives_a_daemon_restart(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path / "daemon")
    stream = Lines("--socket", str(daemon.socket_path), "--groups", "system")
    try:
        old = stream.next()["daemon"]["started_at"]
        daemon.stop()
        daemon = start_daemon(tmp_path / "daemon")  # a new daemon on the same socket
        wait_for(lambda: stream.next()["daemon"]["started_at"] != old, 60, "a new report", 0)
    finally:
        err = stream.stop()
        daemon.stop()
    assert "retrying every 1 s" in err and "daemon is back" in err and "Traceback" not in err
