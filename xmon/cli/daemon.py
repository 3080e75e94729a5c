"""``xmon daemon``: configuration, logging and error reporting around xmon.daemon."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from xmon.collectors.base import add_collector_flags, enabled_collectors
from xmon.config import ConfigError, add_daemon_arguments, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_daemon_arguments(parser)
    add_collector_flags(parser)


def main(args: argparse.Namespace) -> int:
    try:
        config = load_config(args, os.environ)
        collectors = enabled_collectors(args, config.collectors)
    except ConfigError as exc:
        print(f"xmon daemon: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from xmon.daemon.service import Daemon, DaemonError
    from xmon.exporters.prometheus import MetricsServerError

    try:
        asyncio.run(Daemon(config, collectors).run())
    except (DaemonError, MetricsServerError) as exc:
        print(f"xmon daemon: {exc}", file=sys.stderr)
        return 1
    return 0
