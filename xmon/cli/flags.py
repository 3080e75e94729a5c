"""Flags that several commands share, spelled and explained the same way in each."""

from __future__ import annotations

import argparse

from xmon.wire import paths


def socket_help(what: str = "daemon socket") -> str:
    """The ``--socket`` help, with the path this shell would use (``XMON_SOCKET`` included)."""
    return f"{what} (default: $XMON_SOCKET, else {paths.default_socket_path()})"


def add_socket(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--socket", metavar="PATH", help=socket_help())


def add_job(parser: argparse.ArgumentParser | argparse._ArgumentGroup, text: str) -> None:
    """``--job NAME``; ``--job-name`` is kept as a hidden spelling for old scripts."""
    parser.add_argument("--job", metavar="NAME", help=text)
    parser.add_argument("--job-name", dest="job", help=argparse.SUPPRESS)
