"""Fixture sysfs/procfs trees of TPU hosts, laid out as the kernel lays them out.

``sys/bus/pci/devices/<BDF>/{vendor,device,subsystem_device,class,numa_node}`` with an
``iommu_group`` link (vfio generations) or an ``accel/accelN`` child (v2-v4), and
``proc/<PID>/{cmdline,comm,environ,fd/N}`` where fd links name /dev nodes. The checked-in trees
under tests/fixtures/tpu/ are written by this module
(``python tests/support/fakes/tpu_host.py``), and tests build variants of them in temporary
directories.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tpu"

# generation -> (PCI device id, subsystem id, class, /dev style, PCI functions per chip)
PCI: dict[str, tuple[str, str, str, str, int]] = {
    "v2": ("0x0027", "0x004e", "0xff0000", "accel", 1),
    "v3": ("0x0027", "0x004f", "0xff0000", "accel", 1),
    "v4": ("0x005e", "0x005e", "0xff0000", "accel", 1),
    "v5e": ("0x0063", "0x0063", "0x120000", "vfio", 1),
    "v5p": ("0x0062", "0x0062", "0x120000", "vfio", 1),
    "v6e": ("0x006f", "0x006f", "0x120000", "vfio", 1),
    "7x": ("0x0076", "0x0076", "0x120000", "vfio", 2),
}
# Google devices that are not accelerators, and a non-Google one, present on every TPU VM.
OTHER_PCI = {
    "0000:00:00.0": ("0x8086", "0x1237", "0x1100", "0x060000"),  # host bridge
    "0000:00:03.0": ("0x1ae0", "0x0042", "0x0058", "0x020000"),  # gVNIC
    "0000:00:0c.0": ("0x1ae0", "0x001f", "0x0001", "0x010802"),  # Google NVMe
}


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]
    chips: tuple[int, ...] = ()  # indexes into the host's /dev nodes it holds open
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Host:
    generation: str
    chips: int
    procs: tuple[Proc, ...] = ()
    first_group: int = 0  # IOMMU group of the first function (/dev/vfio/N)
    numa_nodes: int = 1  # 0: numa_node -1 (unknown), as many GCE VMs report


def dev_nodes(host: Host) -> list[str]:
    """The /dev node of each PCI function, in order."""
    _, _, _, style, per_chip = PCI[host.generation]
    n = host.chips * per_chip
    if style == "accel":
        return [f"/dev/accel{i}" for i in range(n)]
    return [f"/dev/vfio/{host.first_group + i}" for i in range(n)]


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _pci_function(root: Path, bdf: str, ids: Sequence[str], numa: int) -> Path:
    entry = root / "sys" / "bus" / "pci" / "devices" / bdf
    for name, value in zip(("vendor", "device", "subsystem_device", "class"), ids, strict=True):
        _write(entry / name, value + "\n")
    _write(entry / "numa_node", f"{numa}\n")
    return entry


def write_sysfs(root: Path, host: Host) -> None:
    device_id, subsystem, pci_class, style, per_chip = PCI[host.generation]
    nodes = dev_nodes(host)
    for i, node in enumerate(nodes):
        chip, function = divmod(i, per_chip)
        numa = -1 if host.numa_nodes == 0 else chip * host.numa_nodes // host.chips
        bdf = f"0000:00:{4 + chip:02x}.{function}"
        entry = _pci_function(root, bdf, ("0x1ae0", device_id, subsystem, pci_class), numa)
        if style == "vfio":
            group = node.rsplit("/", 1)[1]
            os.symlink(f"../../../../kernel/iommu_groups/{group}", entry / "iommu_group")
        else:
            name = node.removeprefix("/dev/")  # the accel class device, as in real sysfs
            _write(entry / "accel" / name / "uevent", f"DEVNAME={name}\n")
    for bdf, (vendor, device, sub, cls) in OTHER_PCI.items():
        _pci_function(root, bdf, (vendor, device, sub, cls), -1 if host.numa_nodes == 0 else 0)


def write_procfs(root: Path, host: Host) -> None:
    nodes = dev_nodes(host)
    _, _, _, _, per_chip = PCI[host.generation]
    for proc in host.procs:
        base = root / "proc" / str(proc.pid)
        _write(base / "cmdline", b"\0".join(a.encode() for a in proc.argv) + b"\0")
        _write(base / "comm", Path(proc.argv[0]).name[:15] + "\n")
        _write(base / "environ", b"".join(f"{k}={v}\0".encode() for k, v in proc.environ.items()))
        (base / "fd").mkdir(parents=True)
        links = ["/dev/null", "/dev/pts/0", "/dev/pts/0"]
        held = [n for c in proc.chips for n in nodes[c * per_chip : (c + 1) * per_chip]]
        if held and held[0].startswith("/dev/vfio/"):
            links.append("/dev/vfio/vfio")  # the container node every vfio user holds too
        for fd, target in enumerate([*links, *held]):
            os.symlink(target, base / "fd" / str(fd))


def write_host(root: Path, host: Host) -> Path:
    if root.exists():
        shutil.rmtree(root)
    (root / "proc").mkdir(parents=True)
    write_sysfs(root, host)
    write_procfs(root, host)
    return root


JAX_ENV = {"PATH": "/usr/bin", "HOME": "/home/user"}
TRAIN = ("python3", "train.py", "--config", "llama.yaml")

# The checked-in hosts: one per generation, 4 and 8 chips, one or two chip-owning processes.
HOSTS: dict[str, Host] = {
    "v4-4": Host("v4", 4, (Proc(3100, TRAIN, (0, 1, 2, 3), JAX_ENV),)),
    "v5e-4": Host(
        "v5e",
        4,
        (Proc(4242, TRAIN, (0, 1, 2, 3), JAX_ENV), Proc(777, ("/usr/sbin/sshd",))),
        numa_nodes=0,
    ),
    "v5p-4": Host("v5p", 4, (Proc(6100, TRAIN, (0, 1, 2, 3), JAX_ENV),)),
    "v6e-8": Host(
        "v6e",
        8,
        (
            Proc(
                5001,
                ("python3", "serve.py", "--rank", "0"),
                (0, 1, 2, 3),
                {**JAX_ENV, "TPU_RUNTIME_METRICS_PORTS": "8431"},
            ),
            Proc(
                5002,
                ("python3", "serve.py", "--rank", "1"),
                (4, 5, 6, 7),
                {**JAX_ENV, "TPU_RUNTIME_METRICS_PORTS": "8432"},
            ),
        ),
        first_group=3,
        numa_nodes=2,
    ),  # fmt: skip
    "7x-4": Host("7x", 4, (Proc(7100, TRAIN, (0, 1, 2, 3), JAX_ENV),)),
    "none": Host("v5e", 0, (Proc(777, ("/usr/sbin/sshd",)),)),
}


def main(argv: Sequence[str]) -> int:
    """Rewrite the checked-in fixture trees (or write them under argv[1])."""
    target = Path(argv[1]) if len(argv) > 1 else FIXTURES
    for name, host in HOSTS.items():
        write_host(target / name, host)
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
