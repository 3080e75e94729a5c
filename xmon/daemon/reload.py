"""Configuration reload on SIGHUP: what can change in a running daemon, and what cannot.

A reload re-reads the same sources as start-up (the config file, ``XMON_*`` and the original
flags). An invalid configuration is refused as a whole and the running one is kept; the log
says why and ``xmon_daemon_config_last_reload_successful`` drops to 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from xmon.config import DaemonConfig

# Bound at start-up (sockets, paths, the profiler's writers): a change needs a restart.
RESTART_FIELDS = (
    "listen_host",
    "listen_port",
    "socket_path",
    "logdir",
    "max_message_bytes",
    "max_inflight_bytes",  # gRPC's limit on calls at once is set when its server is made
    "profiling",
)
# Read by the collectors when they are built: a change rebuilds them.
COLLECTOR_FIELDS = ("collectors", "tpu_metrics_addresses", "sysfs_root", "procfs_root", "host")

Loader = Callable[[], tuple[DaemonConfig, list[str]]]


@dataclass(frozen=True)
class ReloadPlan:
    config: DaemonConfig  # what the daemon runs with after the reload
    changed: tuple[str, ...]  # fields that take effect now
    needs_restart: tuple[str, ...]  # fields that changed but keep their running value
    rebuild_collectors: bool


def _differs(old: DaemonConfig, new: DaemonConfig, name: str) -> bool:
    return getattr(old, name, None) != getattr(new, name, None)


def plan_reload(
    old: DaemonConfig, new: DaemonConfig, old_collectors: list[str], new_collectors: list[str]
) -> ReloadPlan:
    """Pure: which changes apply now, and the config that results (restart-only fields keep
    their running values, so the daemon's state always matches its config)."""
    names = [f.name for f in dataclasses.fields(DaemonConfig) if f.name != "config_path"]
    changed = [n for n in names if _differs(old, new, n)]
    restart = tuple(n for n in changed if n in RESTART_FIELDS)
    kept = {n: getattr(old, n) for n in restart}
    rebuild = old_collectors != new_collectors or any(n in COLLECTOR_FIELDS for n in changed)
    return ReloadPlan(
        config=dataclasses.replace(new, **kept),
        changed=tuple(n for n in changed if n not in RESTART_FIELDS),
        needs_restart=restart,
        rebuild_collectors=rebuild,
    )
