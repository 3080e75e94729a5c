"""A real xmon daemon that runs only the tpu collector, on a fixture host."""

from __future__ import annotations

import re
from pathlib import Path

from xmon.collectors import registered

from support.procs import Daemon, start_daemon, wait_for


def tpu_only_daemon(tmp_path: Path, root: Path, addresses: list[str]) -> Daemon:
    """Host and GPU numbers depend on the machine, so every other collector is off."""
    config = tmp_path / "xmon.toml"
    others = [r.name for r in registered() if r.name != "tpu"]
    config.write_text("[collectors]\ntpu = true\n" + "".join(f"{n} = false\n" for n in others))
    env = {"XMON_CONFIG": str(config), "XMON_PATH_SYSFS": str(root / "sys"),
           "XMON_PATH_PROCFS": str(root / "proc")}  # fmt: skip
    if addresses:
        env["XMON_TPU_METRICS_ADDRESSES"] = ",".join(addresses)
    return start_daemon(tmp_path / "daemon", env=env)


def settled_scrape(daemon: Daemon, services: int) -> str:
    """/metrics once ``services`` libtpu services have answered."""

    def ready() -> str | None:
        text = daemon.scrape()
        up = re.findall(r"^xmon_runtime_service_up\{.*\} 1\.0$", text, re.MULTILINE)
        return text if len(up) == services else None

    return str(wait_for(ready, 30, f"{services} libtpu services up in /metrics"))
