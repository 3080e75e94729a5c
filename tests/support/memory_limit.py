"""A memory limit on a running process, as systemd's ``MemoryMax=`` sets one for the service.

A memory cgroup where the tests may make one (v2, or v1's memory controller, under the test's
own cgroup), else RLIMIT_DATA (private writable memory: what the heap and protobuf's arenas
take, not the file pages a process maps). ``limit_memory`` says which it used.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup() -> tuple[Path, str] | None:
    """The test's own memory cgroup directory and the file its limit goes in."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (CGROUP_ROOT / "cgroup.controllers").exists():
            return CGROUP_ROOT / path.lstrip("/"), "memory.max"
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/"), "memory.limit_in_bytes"
    return None


def limit_memory(pid: int, limit_bytes: int, name: str) -> str:
    """Put ``pid`` under a memory limit of ``limit_bytes``; returns how ("cgroup", "rlimit")."""
    own = _own_cgroup()
    if own is not None:
        parent, limit_file = own
        group = parent / name
        try:
            group.mkdir(exist_ok=True)
            (group / limit_file).write_text(str(limit_bytes))
            (group / "cgroup.procs").write_text(str(pid))
            return "cgroup"
        except OSError:
            pass
    resource.prlimit(pid, resource.RLIMIT_DATA, (limit_bytes, limit_bytes))
    return "rlimit"


def release(name: str) -> None:
    """Remove the cgroup ``limit_memory`` made (once its processes have gone)."""
    own = _own_cgroup()
    if own is not None:
        try:
            os.rmdir(own[0] / name)
        except OSError:
            pass
