"""TPU discovery from fixture sysfs/procfs trees, one per generation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xmon.collectors.tpu_discovery import (
    device_holders,
    device_slots,
    discover_functions,
    generation_of,
    metrics_addresses,
    read_command,
    read_environ,
)

from support.fakes.tpu_host import FIXTURES, HOSTS, Host, Proc, write_host

# fixture -> (device_kind, devices, chips, first /dev node, last /dev node, numa of last)
EXPECTED = {
    "v4-4": ("TPU v4", 4, 4, "/dev/accel0", "/dev/accel3", 0),
    "v5e-4": ("TPU v5 lite", 4, 4, "/dev/vfio/0", "/dev/vfio/3", None),
    "v5p-4": ("TPU v5", 4, 4, "/dev/vfio/0", "/dev/vfio/3", 0),
    "v6e-8": ("TPU v6 lite", 8, 8, "/dev/vfio/3", "/dev/vfio/10", 1),
    "7x-4": ("TPU7x", 8, 4, "/dev/vfio/0", "/dev/vfio/7", 0),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_generations(name: str) -> None:
    kind, devices, chips, first, last, numa = EXPECTED[name]
    slots = device_slots(discover_functions(FIXTURES / name / "sys"))
    assert [s.index for s in slots] == list(range(devices))
    assert {s.generation.device_kind for s in slots} == {kind}
    assert len({s.chip_index for s in slots}) == chips
    assert slots[0].function.device_path == first and slots[-1].function.device_path == last
    assert slots[-1].function.numa_node == numa


def test_vfio_nodes_sort_naturally() -> None:
    slots = device_slots(discover_functions(FIXTURES / "v6e-8" / "sys"))
    assert [s.function.device_path for s in slots][-2:] == ["/dev/vfio/9", "/dev/vfio/10"]
    assert [s.function.bdf for s in slots] == [f"0000:00:{4 + i:02x}.0" for i in range(8)]


def test_7x_has_two_devices_per_chip() -> None:
    slots = device_slots(discover_functions(FIXTURES / "7x-4" / "sys"))
    assert [s.chip_index for s in slots] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [s.function.bdf[-1] for s in slots] == ["0", "1"] * 4


def test_v2_shares_one_function_between_two_devices(tmp_path: Path) -> None:
    write_host(tmp_path, Host("v3", 2))
    slots = device_slots(discover_functions(tmp_path / "sys"))
    assert [(s.chip_index, s.function.device_path) for s in slots] == [
        (0, "/dev/accel0"), (0, "/dev/accel0"), (1, "/dev/accel1"), (1, "/dev/accel1")]  # fmt: skip
    assert slots[0].generation.device_kind == "TPU v3"


def test_no_tpu_and_no_sysfs() -> None:
    assert discover_functions(FIXTURES / "none" / "sys") == []  # only gVNIC, NVMe, host bridge
    assert discover_functions(Path("/nonexistent")) == []


@pytest.mark.parametrize(
    ("device", "subsystem", "cls", "kind"),
    [
        ("0x0027", "0x004e", "0xff0000", "TPU v2"),
        ("0x0027", "0x004f", "0xff0000", "TPU v3"),
        ("0x006f", "0x1234", "0x120000", "TPU v6 lite"),  # any subsystem
        ("0x00ff", "0x00ff", "0x120000", "TPU"),  # a generation this table does not know yet
        ("0x00ff", "0x00ff", "0xff0000", "TPU"),
    ],
)
def test_generation_of(device: str, subsystem: str, cls: str, kind: str) -> None:
    assert generation_of(device, subsystem, cls).device_kind == kind


@pytest.mark.parametrize("device,cls", [("0x0042", "0x020000"), ("0x001f", "0x010802"),
                                        ("0x0027", "0x020000")])  # fmt: skip
def test_google_devices_that_are_not_tpus(device: str, cls: str) -> None:
    with pytest.raises(KeyError):
        generation_of(device, "0x0000", cls)


def test_holders_from_procfs() -> None:
    root = FIXTURES / "v6e-8"
    slots = device_slots(discover_functions(root / "sys"))
    holders = device_holders(root / "proc", [s.function.device_path or "" for s in slots])
    assert holders["/dev/vfio/3"] == (5001,) and holders["/dev/vfio/10"] == (5002,)
    assert "/dev/vfio/vfio" not in holders


def test_holders_skip_what_cannot_be_read(tmp_path: Path) -> None:
    host = Host("v5e", 2, (Proc(10, ("a",), (0,)), Proc(11, ("b",), (0, 1))))
    write_host(tmp_path, host)
    (tmp_path / "proc" / "12").mkdir()
    (tmp_path / "proc" / "12" / "fd").write_text("not a directory")  # as if unreadable
    (tmp_path / "proc" / "self").mkdir()  # not a pid
    holders = device_holders(tmp_path / "proc", ["/dev/vfio/0", "/dev/vfio/1", "/dev/null"])
    assert holders == {"/dev/vfio/0": (10, 11), "/dev/vfio/1": (11,), "/dev/null": ()}
    assert device_holders(tmp_path / "missing", ["/dev/vfio/0"]) == {"/dev/vfio/0": ()}


def test_environ_and_command() -> None:
    proc = FIXTURES / "v6e-8" / "proc"
    env = read_environ(proc, 5002)
    assert env is not None and env["TPU_RUNTIME_METRICS_PORTS"] == "8432"
    assert read_command(proc, 5002) == "python3 serve.py --rank 1"
    assert read_environ(proc, 99999) is None and read_command(proc, 99999) is None


def test_command_falls_back_to_comm(tmp_path: Path) -> None:
    base = tmp_path / "42"
    base.mkdir()
    (base / "cmdline").write_bytes(b"")  # kernel threads and zombies
    (base / "comm").write_text("kworker/0:1\n")
    assert read_command(tmp_path, 42) == "kworker/0:1"


@pytest.mark.parametrize(
    ("environ", "addresses"),
    [
        ({}, ()),
        ({"TPU_RUNTIME_METRICS_PORTS": "8431"}, ("localhost:8431",)),
        ({"TPU_RUNTIME_METRICS_PORTS": "8431, 8432,x,0,70000"},
         ("localhost:8431", "localhost:8432")),
        ({"TPU_RUNTIME_METRICS_ADDRESS": "/run/tpu/metrics.sock",
          "TPU_RUNTIME_METRICS_PORTS": "8431"}, ("unix:/run/tpu/metrics.sock",)),
        ({"TPU_RUNTIME_METRICS_ADDRESS": "127.0.0.1:9000"}, ("127.0.0.1:9000",)),
    ],
)  # fmt: skip
def test_metrics_addresses(environ: dict[str, str], addresses: tuple[str, ...]) -> None:
    assert metrics_addresses(environ) == addresses


def test_checked_in_fixtures_are_what_the_builder_writes(tmp_path: Path) -> None:
    for name, host in HOSTS.items():
        built, checked_in = write_host(tmp_path / name, host), FIXTURES / name
        assert _tree(built) == _tree(checked_in), (
            f"rerun python tests/support/fakes/tpu_host.py ({name})"
        )


def _tree(root: Path) -> dict[str, str | bytes]:
    """Relative path -> link target or file bytes (directories implied)."""
    out: dict[str, str | bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = path.read_bytes()
    return out
