"""SIGHUP reloads the configuration; a bad one is refused and the running one kept."""

from __future__ import annotations

import dataclasses
import signal
import sys
import urllib.request
from pathlib import Path

import pytest

from xmon.config import DaemonConfig
from xmon.daemon.reload import plan_reload

from support.procs import METRICS_URL, base_env, spawn, wait_for


def _config(**changes: object) -> DaemonConfig:
    return dataclasses.replace(DaemonConfig(socket_path=Path("/s"), logdir=Path("/l")), **changes)


@pytest.mark.parametrize(
    "changes,collectors,live,restart,rebuild",
    [
        ({}, ["host"], (), (), False),
        ({"period_seconds": 2.0}, ["host"], ("period_seconds",), (), False),
        ({"peaks": {"cpu": {"flops_per_second": 1e11}}}, ["host"], ("peaks",), (), False),
        ({"listen_port": 1}, ["host"], (), ("listen_port",), False),
        ({"socket_path": Path("/other")}, ["host"], (), ("socket_path",), False),
        ({}, ["host", "tpu"], (), (), True),
        (
            {"tpu_metrics_addresses": ("localhost:1",)},
            ["host"],
            ("tpu_metrics_addresses",),
            (),
            True,
        ),
    ],
)
def test_plan_reload(
    changes: dict[str, object],
    collectors: list[str],
    live: tuple[str, ...],
    restart: tuple[str, ...],
    rebuild: bool,
) -> None:
    old = _config()
    plan = plan_reload(old, _config(**changes), ["host"], collectors)
    assert plan.changed == live
    assert plan.needs_restart == restart
    assert plan.rebuild_collectors is rebuild
    for name in restart:  # the daemon keeps running with what it is bound to
        assert getattr(plan.config, name) == getattr(old, name)


def _value(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


@pytest.mark.e2e
def test_sighup_applies_a_good_config_and_refuses_a_bad_one(tmp_path: Path) -> None:
    config = tmp_path / "xmon.toml"
    config.write_text("period_seconds = 0.5\nprogram_series_limit = 50\n")
    cmd = [sys.executable, "-m", "xmon", "daemon", "--config", str(config),
           "--listen", "127.0.0.1:0", "--socket", str(tmp_path / "x.sock")]  # fmt: skip
    env = base_env(XMON_LOGDIR=str(tmp_path / "tb"))
    daemon = spawn(cmd, tmp_path / "daemon.log", env)
    try:
        match = wait_for(lambda: METRICS_URL.search(daemon.log_path.read_bytes()), 30, "start")
        url = f"http://127.0.0.1:{int(match.group(2))}/metrics"
        wait_for(lambda: _value(url, "xmon_up") == 1, 10, "a first snapshot")

        config.write_text("period_seconds = 0.25\nprogram_series_limit = 10\n")
        daemon.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: _value(url, "xmon_daemon_config_reloads_total") == 1, 10, "reload")
        assert "configuration reloaded: period_seconds, program_series_limit" in daemon.log()

        config.write_text("period_seconds = 'fast'\n")
        daemon.popen.send_signal(signal.SIGHUP)
        wait_for(
            lambda: _value(url, "xmon_daemon_config_reload_failures_total") == 1, 10, "refusal"
        )
        assert _value(url, "xmon_daemon_config_last_reload_successful") == 0
        assert "keeping the running configuration" in daemon.log()
        assert "period_seconds" in daemon.log().split("keeping the running configuration")[1]
        assert daemon.alive() and _value(url, "xmon_up") == 1
        assert "Traceback" not in daemon.log()
    finally:
        assert daemon.stop() == 0
