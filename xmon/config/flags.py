"""The daemon's command-line flags; each names the ``XMON_*`` variable that stands for it."""

from __future__ import annotations

import argparse
from typing import Any

from xmon.config.values import LOG_LEVELS
from xmon.wire import paths

_FLAG_HELP = (  # (flag, metavar, help)
    ("--listen", "HOST:PORT", f"/metrics address (default 0.0.0.0:{paths.DEFAULT_METRICS_PORT})"),
    ("--socket", "PATH", "agent and control socket"),
    ("--logdir", "DIR", "TensorBoard logdir"),
    ("--period", "SECONDS", "sample period, 0.05-3600 (default 1)"),
    ("--config", "FILE", f"TOML config file (default {paths.DEFAULT_CONFIG_PATH} if present)"),
    ("--log-level", "LEVEL", f"one of {', '.join(LOG_LEVELS)} (default info)"),
)


def add_daemon_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the daemon's flags; every default is None so load_config can tell "not given"."""
    group = parser.add_argument_group("daemon")
    for flag, metavar, text in _FLAG_HELP:
        env_var = "XMON_" + flag[2:].replace("-", "_").upper()
        group.add_argument(flag, metavar=metavar, help=f"{text}; env {env_var}")
    add_hardware_arguments(group)


def add_hardware_arguments(parser: argparse.ArgumentParser | Any) -> None:
    """Flags the hardware collectors read (shared by the daemon and `xmon ls`)."""
    parser.add_argument(
        "--tpu-metrics-address", dest="tpu_metrics_address", action="append", metavar="ADDR",
        help="libtpu runtime metrics server (HOST:PORT or unix:PATH), repeatable; polled even "
        "when no TPU is visible (default: the ports the chips' owners were started with, else "
        "localhost:8431); env XMON_TPU_METRICS_ADDRESSES, comma-separated",
    )  # fmt: skip
    parser.add_argument(
        "--path.sysfs", dest="path_sysfs", metavar="DIR",
        help="where sysfs is mounted (default /sys); env XMON_PATH_SYSFS",
    )  # fmt: skip
    parser.add_argument(
        "--path.procfs", dest="path_procfs", metavar="DIR",
        help="where procfs is mounted (default /proc); env XMON_PATH_PROCFS",
    )  # fmt: skip
