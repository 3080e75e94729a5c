"""The real ``tpu-info`` CLI and xmon, pointed at the same fake libtpu server, agree.

tpu-info's client is fixed to ``localhost:8431`` with gRPC local credentials, so the fake is
bound there for this test (skipped if the port is taken). tpu-info also hard-codes ``/sys`` and
``/proc`` for chip discovery; a small wrapper rebases those two paths onto the fixture tree
(``glob.glob`` and ``os.readlink``), so tpu-info's own discovery code runs unmodified.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from xmon.collectors.base import CollectContext
from xmon.collectors.tpu import TpuCollector

from support.fakes.libtpu_server import DCN_LATENCY, FakeLibtpu, scenario
from support.fakes.tpu_host import FIXTURES
from support.procs import REPO, base_env

ROOT = FIXTURES / "v5e-4"
ADDRESS = "localhost:8431"
# The fake serves libtpu's default address, which `xmon ls` without a job must find unserved.
pytestmark = pytest.mark.xdist_group("libtpu-default-address")
GIB = 2**30
WRAPPER = """
import glob, os, sys
SYS, PROC = os.environ["FIXTURE_SYSFS"], os.environ["FIXTURE_PROCFS"]
_glob, _readlink = glob.glob, os.readlink


def rebase(path):
    for real, fixture in (("/sys/", SYS + "/"), ("/proc/", PROC + "/")):
        if path.startswith(real):
            return fixture + path[len(real):]
    return path


def fixture_glob(pattern, *args, **kwargs):
    found = _glob(rebase(pattern), *args, **kwargs)
    if pattern.startswith("/proc/"):  # tpu-info parses the pid out of "/proc/PID/fd/N"
        return ["/proc" + p[len(PROC):] for p in found]
    return found


glob.glob = fixture_glob
os.readlink = lambda path, *a, **k: _readlink(rebase(os.fspath(path)), *a, **k)

if __name__ == "__main__":  # tpu-info spawns a canary process that re-imports this module
    sys.argv = ["tpu-info"]
    from tpu_info import cli

    cli.print_chip_info()
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLibtpu]:
    pytest.importorskip("tpu_info.cli", reason="tpu-info is not installed (pip install tpu-info)")
    try:
        server = FakeLibtpu(scenario("v5e", 4, multislice=True), ADDRESS).start()
    except OSError as exc:
        pytest.skip(f"{ADDRESS} is taken, and tpu-info can only read that address ({exc})")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tpu_info_output(fake: FakeLibtpu, tmp_path_factory: pytest.TempPathFactory) -> str:
    wrapper = tmp_path_factory.mktemp("tpu_info") / "tpu_info_on_fixture.py"
    wrapper.write_text(WRAPPER)
    result = subprocess.run(
        [sys.executable, str(wrapper)], capture_output=True, text=True, timeout=120,
        env=base_env(COLUMNS="200", FIXTURE_SYSFS=str(ROOT / "sys"),
                     FIXTURE_PROCFS=str(ROOT / "proc")),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def rows(output: str, title: str, cells: str) -> list[tuple[str, ...]]:
    """Rows of one of tpu-info's tables (rich's markdown box), after its title."""
    section = output.split(title, 1)[1]
    return re.findall(r"^\|\s*" + cells + r"\s*\|?\s*$", section, re.MULTILINE)


def test_same_hbm_usage_and_duty_cycle(fake: FakeLibtpu, tpu_info_output: str) -> None:
    theirs = rows(tpu_info_output, "TPU Runtime Utilization",
                  r"(\d+)\s*\|\s*([\d.]+) GiB / ([\d.]+) GiB\s*\|\s*([\d.]+)%")  # fmt: skip
    assert len(theirs) == 4, tpu_info_output
    env = base_env(XMON_SOCKET="/nonexistent/xmon.sock")
    result = subprocess.run(
        [sys.executable, "-m", "xmon", "ls", "--json", "--direct",
         "--path.sysfs", str(ROOT / "sys"), "--path.procfs", str(ROOT / "proc")],
        # no address given: xmon polls libtpu's default, localhost:8431, as tpu-info does
        capture_output=True, text=True, timeout=60, env=env, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ours = [
        (str(d["device"]), f"{d['memory_used_bytes'] / GIB:.2f}",
         f"{d['memory_total_bytes'] / GIB:.2f}", f"{d['duty_cycle_ratio'] * 100:.2f}")
        for d in json.loads(result.stdout)
    ]  # fmt: skip
    assert ours == theirs
    assert len({used for _, used, _, _ in ours}) == 4  # four different numbers were compared


def test_same_chips_and_owner(tpu_info_output: str) -> None:
    chips = rows(
        tpu_info_output, "TPU Chips", r"(/dev/vfio/\d+)\s*\|\s*TPU v5e chip\s*\|\s*1\s*\|\s*(\S+)"
    )
    assert chips == [(f"/dev/vfio/{i}", "4242") for i in range(4)], tpu_info_output


def test_same_buffer_transfer_latency_percentiles(fake: FakeLibtpu, tpu_info_output: str) -> None:
    us = r"\s*\|\s*([\d.]+) us"
    theirs = rows(tpu_info_output, "TPU Buffer Transfer Latency", r"(\S+)" + us * 4)
    collector = TpuCollector(ROOT / "sys", ROOT / "proc", (ADDRESS,))
    try:
        metrics = collector.collect(CollectContext()).runtime_services[0].metrics
    finally:
        collector.close()
    ours = []
    for m in metrics:
        if m.name == DCN_LATENCY and m.distribution is not None:
            size = dict(m.attributes)["buffer_size"]
            ours.append((size, *(f"{v * 1e6:.2f}" for _, v in m.distribution.quantiles)))
    assert len(ours) == 2 and ours == theirs, tpu_info_output
