"""``xmon daemon``: configuration, logging and error reporting around xmon.daemon."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
from pathlib import Path

from xmon.cli import flags
from xmon.collectors.base import add_collector_flags, enabled_collectors
from xmon.config import ConfigError, DaemonConfig, add_daemon_arguments, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_daemon_arguments(parser)
    add_collector_flags(parser)
    for action in parser._actions:  # the shared wording, with the default path of this shell
        if "--socket" in action.option_strings:
            action.help = flags.socket_help("agent and control socket") + "; env XMON_SOCKET"


def _load(args: argparse.Namespace) -> tuple[DaemonConfig, list[str]]:
    """The configuration from flags, environment and file (at start and on SIGHUP)."""
    config = load_config(args, os.environ)
    return config, enabled_collectors(args, config.collectors)


def logdir_problem(logdir: Path) -> str | None:
    """Why the daemon could not write its TensorBoard logdir (made if missing), or None."""
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".xmon-probe-", dir=logdir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"not writable ({exc.strerror or exc}); pass a directory this user can write"
    return None


def main(args: argparse.Namespace) -> int:
    try:
        config, collectors = _load(args)
    except ConfigError as exc:
        print(f"xmon daemon: {exc}", file=sys.stderr)
        return 2
    problem = logdir_problem(config.logdir)
    if problem is not None:  # now, not when the first job attaches
        print(f"xmon daemon: --logdir {config.logdir}: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from xmon.daemon import memory

    memory.limit_arenas()  # before gRPC and the collectors start their threads
    from xmon.daemon.service import Daemon, DaemonError
    from xmon.exporters.prometheus import MetricsServerError

    try:
        asyncio.run(Daemon(config, collectors, reload_config=lambda: _load(args)).run())
    except (DaemonError, MetricsServerError) as exc:
        print(f"xmon daemon: {exc}", file=sys.stderr)
        return 1
    return 0
