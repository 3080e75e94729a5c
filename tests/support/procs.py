"""Real processes for end-to-end tests: the xmon daemon, a JAX job, a Prometheus server."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
METRICS_URL = re.compile(rb"metrics on http://([^\s/]+):(\d+)/metrics")
CPU_PEAKS = {"cpu": {"flops_per_second": 1e11, "memory_bytes_per_second": 2e10}}


def json_written(path: Path) -> Any:
    """The JSON document at ``path`` once its writer has finished it; None before (absent, or
    still being written: a job's ``write_text`` is not atomic, and a test that read the file
    the moment it appeared read it empty on a busy host)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll until predicate() is truthy; fail with a message naming what never happened."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last one
            last_error = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last error: {last_error})"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A terminal view sizes itself by these where they are set, over its terminal's real size:
# pytest-xdist's workers set them (80 x 24), and a view in a wider tmux pane drew 80 columns.
TERMINAL_SIZE = ("COLUMNS", "LINES")


def base_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("XMON_") and k not in TERMINAL_SIZE
    }
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["XMON_QUIET"] = "0"
    env.update(extra)
    return env


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return int(self.popen.returncode)


def spawn(cmd: list[str], log_path: Path, env: dict[str, str]) -> Proc:
    log_file = open(log_path, "wb")  # noqa: SIM115 - owned by the child
    popen = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    log_file.close()
    return Proc(popen, log_path)


@dataclass
class Daemon(Proc):
    socket_path: Path = Path()
    metrics_port: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def scrape(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return str(response.read().decode())


def start_daemon(
    workdir: Path,
    port: int = 0,
    period: float = 0.5,
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
    prefix: tuple[str, ...] = (),
) -> Daemon:
    """``prefix``: a command to run the daemon under (``setpriv`` to another user)."""
    workdir.mkdir(parents=True, exist_ok=True)
    socket_path = workdir / "xmon.sock"
    full_env = base_env(XMON_LOGDIR=str(workdir / "tb"), XMON_PEAKS=json.dumps(CPU_PEAKS))
    full_env.update(env or {})
    cmd = [*prefix, sys.executable, "-m", "xmon", "daemon", "--listen", f"127.0.0.1:{port}",
           "--socket", str(socket_path), "--period", str(period), *(extra_args or ())]  # fmt: skip
    log_path = workdir / f"daemon-{time.monotonic_ns()}.log"
    proc = spawn(cmd, log_path, full_env)

    def started() -> re.Match[bytes] | None:
        if proc.popen.poll() is not None:
            raise AssertionError(f"daemon exited {proc.popen.returncode}:\n{proc.log()}")
        return METRICS_URL.search(log_path.read_bytes())

    match = wait_for(started, 30, "the daemon to listen")
    return Daemon(proc.popen, log_path, socket_path, int(match.group(2)), full_env)


def start_job(
    workdir: Path,
    socket_path: Path,
    script: str,
    name: str,
    devices: int = 4,
    period: float = 0.5,
    **env: str,
) -> Proc:
    """Run a Python JAX script (text) with the agent attached via `xmon run`."""
    script_path = workdir / f"{name}.py"
    script_path.write_text(script)
    full_env = base_env(
        XMON_SOCKET=str(socket_path),
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        XMON_LEDGER_FIRST_DELAY="1",  # the first execution sample soon, then the default pace
    )
    full_env.update(env)
    cmd = [sys.executable, "-m", "xmon", "run", "--job-name", name, "--period", str(period), "--",
           sys.executable, str(script_path)]  # fmt: skip
    return spawn(cmd, workdir / f"{name}.log", full_env)


@dataclass
class Prometheus(Proc):
    url: str = ""

    def query(self, expr: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The active alerts (pending or firing) of the rule ``name``, as /api/v1/alerts gives
        them: labels, state, value."""
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return [a for a in body["data"]["alerts"] if a["labels"].get("alertname") == name]

    def values(self, expr: str) -> dict[str, float]:
        """{device-or-pid label: value} for an instant vector."""
        out = {}
        for sample in self.query(expr):
            metric = sample["metric"]
            key = metric.get("device") or metric.get("pid") or metric.get("__name__", "")
            out[key] = float(sample["value"][1])
        return out


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def start_prometheus(workdir: Path, targets: list[str], rule_files: list[Path] = ()) -> Prometheus:
    binary = prometheus_binary()
    assert binary, "prometheus is not installed (apt-get install -y prometheus)"
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = workdir / "prometheus.yml"
    rules = "".join(f"\n  - {path}" for path in rule_files)
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        + (f"rule_files:{rules}\n" if rule_files else "")
        + "scrape_configs:\n  - job_name: xmon\n    static_configs:\n"
        + f"      - targets: {json.dumps(targets)}\n"
    )
    cmd = [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
           f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip
    proc = spawn(cmd, workdir / "prometheus.log", dict(os.environ))
    prom = Prometheus(proc.popen, proc.log_path, f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if not prom.alive():
            raise AssertionError(f"prometheus exited:\n{prom.log()}")
        with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as response:
            return response.status == 200

    wait_for(ready, 30, "prometheus to be ready")
    return prom
