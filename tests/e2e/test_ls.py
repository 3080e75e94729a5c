"""``xmon ls``: rendering, then the real command, directly and through a real daemon.

Hardware is a fixture sysfs/procfs tree plus a fake libtpu metrics server (real gRPC); other
hardware collectors (nvml) are switched off so the results do not depend on this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from xmon.collectors import registered

from support.fakes.libtpu_server import Fakes, scenario
from support.fakes.tpu_host import FIXTURES
from support.procs import REPO, base_env, start_daemon, start_job, wait_for

GIB = 2**30
V5E = FIXTURES / "v5e-4"


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    started = Fakes()
    yield started
    started.stop()


# --- the command -----------------------------------------------------------------------------


def only_tpu_config(tmp_path: Path) -> Path:
    """A daemon config that turns off every other hardware collector (nvml on a GPU host)."""
    others = [r.name for r in registered() if r.name not in ("tpu", "host")]
    path = tmp_path / "xmon.toml"
    path.write_text("[collectors]\n" + "".join(f"{n} = false\n" for n in others))
    return path


def ls(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xmon", "ls", *args], capture_output=True,
                          text=True, env=env or base_env(), cwd=REPO, timeout=60)  # fmt: skip


def fixture_env(tmp_path: Path, root: Path, *addresses: str) -> dict[str, str]:
    env = base_env(XMON_PATH_SYSFS=str(root / "sys"), XMON_PATH_PROCFS=str(root / "proc"),
                   XMON_CONFIG=str(only_tpu_config(tmp_path)),
                   XMON_SOCKET=str(tmp_path / "absent.sock"))  # fmt: skip
    if addresses:
        env["XMON_TPU_METRICS_ADDRESSES"] = ",".join(addresses)
    return env


def expected_json(fake_scenario: Any, address: str, pid: int) -> list[dict[str, Any]]:
    return [
        {"device": i, "memory_used_bytes": d.hbm_used, "memory_total_bytes": d.hbm_total,
         "duty_cycle_ratio": d.duty_pct / 100, "runtime_address": address, "pid": pid}
        for i, d in enumerate(fake_scenario.devices)
    ]  # fmt: skip


def picked(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("device", "memory_used_bytes", "memory_total_bytes", "duty_cycle_ratio",
            "runtime_address")  # fmt: skip
    return [{**{k: d[k] for k in keys}, "pid": d["processes"][0]["pid"]} for d in data]


def test_direct_json(fakes: Fakes, tmp_path: Path) -> None:
    fake = fakes(scenario("v5e", 4))
    result = ls("--json", env=fixture_env(tmp_path, V5E, fake.address))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert picked(data) == expected_json(fake.scenario, fake.address, 4242)
    assert data[0]["device_kind"] == "TPU v5 lite" and data[0]["device_path"] == "/dev/vfio/0"
    assert data[0]["processes"][0]["command"] == "python3 train.py --config llama.yaml"


def test_direct_table_with_flags(fakes: Fakes, tmp_path: Path) -> None:
    fake = fakes(scenario("v6e", 8))
    root = FIXTURES / "v6e-8"
    env = fixture_env(tmp_path, FIXTURES / "none")  # flags beat the environment
    result = ls("--direct", "--path.sysfs", str(root / "sys"), "--path.procfs", str(root / "proc"),
                "--tpu-metrics-address", fake.address, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "8 device(s), from direct"
    d0 = fake.scenario.devices[0]
    assert f"{d0.hbm_used / GIB:.2f} GiB / 31.25 GiB" in lines[2] and "92.5%" in lines[2]
    assert lines[-1].split()[-4:] == ["python3", "serve.py", "--rank", "1"]


def test_no_accelerator(tmp_path: Path) -> None:
    env = fixture_env(tmp_path, FIXTURES / "none")
    result = ls(env=env)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"no TPU/GPU found; no JAX job attached ({os.cpu_count()} host CPUs)\n"
    result = ls("--json", env=env)
    assert (result.returncode, result.stdout) == (0, "[]\n")
    assert result.stderr.startswith("no TPU/GPU found;")


@pytest.mark.xdist_group("libtpu-default-address")  # tests/e2e/test_tpu_interop.py serves it
def test_chips_but_no_job_serving_metrics(tmp_path: Path) -> None:
    result = ls("--json", env=fixture_env(tmp_path, V5E))  # libtpu's default: localhost:8431
    assert result.returncode == 0
    assert [d["memory_used_bytes"] for d in json.loads(result.stdout)] == [None] * 4
    if "localhost:8431 not answering" not in result.stderr:
        pytest.skip("something serves localhost:8431 on this machine")
    assert "TPU_RUNTIME_METRICS_PORTS" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--tpu-metrics-address", "nohost"), "--tpu-metrics-address: expected HOST:PORT"),
     (("--timeout", "0"), "--timeout must be"),
     (("--config", "/nonexistent.toml"), "no such file")],
)  # fmt: skip
def test_bad_settings_are_one_line_errors(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = ls(*args, env=fixture_env(tmp_path, FIXTURES / "none"))
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr
    assert result.stderr.startswith("xmon ls: ") and "Traceback" not in result.stderr


def test_dead_socket_falls_back_to_direct(tmp_path: Path) -> None:
    env = fixture_env(tmp_path, FIXTURES / "none")
    Path(env["XMON_SOCKET"]).write_text("")  # left behind by a daemon that died
    result = ls(env=env)
    assert result.returncode == 0 and result.stdout.startswith("no TPU/GPU found")
    assert "no daemon answers" in result.stderr and "reading the hardware directly" in result.stderr


def test_through_the_daemon(fakes: Fakes, tmp_path: Path) -> None:
    fake = fakes(scenario("v5e", 4))
    env = fixture_env(tmp_path, V5E, fake.address)
    daemon = start_daemon(tmp_path / "d", env={k: v for k, v in env.items() if k != "XMON_SOCKET"})
    try:
        env["XMON_SOCKET"] = str(daemon.socket_path)
        env["XMON_PATH_SYSFS"] = str(FIXTURES / "none" / "sys")  # ls itself must not read it

        def listed() -> list[dict[str, Any]] | None:
            result = ls("--json", env=env)
            data = json.loads(result.stdout) if result.returncode == 0 else []
            return data if data and data[0]["memory_used_bytes"] else None

        data = wait_for(listed, 30, "the daemon to list the fake's devices")
        assert picked(data) == expected_json(fake.scenario, fake.address, 4242)
        table = ls(env=env)
        assert table.stdout.startswith(f"4 device(s), from daemon on {daemon.socket_path}")
        # The daemon reads no hardware for snapshots nobody reads; ls asks for a fresh one, so
        # a job's new allocation shows at once, not at the next full poll (10 s by default).
        grown = tuple(replace(d, hbm_used=d.hbm_used + 2**30) for d in fake.scenario.devices)
        fake.scenario = replace(fake.scenario, devices=grown)
        fresh = json.loads(ls("--json", env=env).stdout)
        assert [d["memory_used_bytes"] for d in fresh] == [d.hbm_used for d in grown]
    finally:
        daemon.stop()


def test_cpu_job_through_the_daemon(tmp_path: Path) -> None:
    env = fixture_env(tmp_path, FIXTURES / "none")
    daemon = start_daemon(tmp_path / "d", env={k: v for k, v in env.items() if k != "XMON_SOCKET"})
    script = "import time, jax\njax.numpy.ones(4).block_until_ready()\ntime.sleep(60)\n"
    job = start_job(tmp_path, daemon.socket_path, script, "cpujob", devices=4)
    try:
        env["XMON_SOCKET"] = str(daemon.socket_path)

        def message() -> str | None:
            out = ls(env=env).stdout
            return out if "JAX devices" in out else None

        out = wait_for(message, 90, "the job's CPU devices in xmon ls")
        where = f"JAX devices of job cpujob (pid {job.popen.pid})"
        assert out == f"no TPU/GPU found; 4 CPU devices ({where})\n"
        listed = json.loads(ls("--json", env=env).stdout)  # the JSON agrees with the text
        assert [d["platform"] for d in listed] == ["cpu"] * 4
    finally:
        job.stop()
        daemon.stop()
