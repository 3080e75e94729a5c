"""``xmon fleet`` facing what is not a usable Prometheus: one line on stderr, exit 2, never a
traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.procs import REPO, Daemon, base_env, free_port


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xmon", "fleet", *args], capture_output=True,
                          text=True, timeout=60, env=base_env(), cwd=REPO)  # fmt: skip


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xmon fleet: "), result.stderr
    return lines[0]


@pytest.mark.e2e
def test_nobody_listening() -> None:
    line = one_line_error(fleet("--prometheus", f"http://127.0.0.1:{free_port()}"))
    assert "cannot reach Prometheus" in line


@pytest.mark.e2e
def test_an_http_server_that_is_not_prometheus(daemon: Daemon) -> None:
    line = one_line_error(fleet("--prometheus", f"http://127.0.0.1:{daemon.metrics_port}"))
    assert f"127.0.0.1:{daemon.metrics_port}" in line


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "says"),
    [(["--prometheus", "localhost:9090"], "not an http(s) URL"),
     (["--prometheus", "http://x", "--watch", "0.1"], "at least 0.5 seconds"),
     (["--prometheus", "http://x", "--watch", "2", "--json"], "no --json")],
)  # fmt: skip
def test_options_it_cannot_use(args: list[str], says: str) -> None:
    assert says in one_line_error(fleet(*args))
