"""``xmon`` command line: one subcommand per module under xmon.cli.

Imports stay inside the subcommands so ``xmon daemon`` and the views never import jax.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from xmon import __version__

Handler = Callable[[argparse.Namespace], int]


def _daemon(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import daemon

    daemon.add_arguments(parser)
    return daemon.main


def _run(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import run

    run.add_arguments(parser)
    return run.main


def _demo(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import demo

    demo.add_arguments(parser)
    return demo.main


def _monitor(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import monitor

    monitor.add_arguments(parser)
    return monitor.main


def _top(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import top

    top.add_arguments(parser)
    return top.main


def _capture(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import capture

    capture.add_arguments(parser)
    return capture.main


def _programs(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import programs

    programs.add_arguments(parser)
    return programs.main


def _install_service(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import install_service

    install_service.add_arguments(parser)
    return install_service.main


def _ls(parser: argparse.ArgumentParser) -> Handler:
    from xmon.cli import ls

    ls.add_arguments(parser)
    return ls.main


SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Handler]]] = {
    "daemon": ("run the per-host monitoring daemon", _daemon),
    "capture": ("record a trace or memory profile inside a running JAX job", _capture),
    "programs": ("list the compiled XLA programs of the jobs, or print one's HLO", _programs),
    "run": ("run a command with the xmon agent attached to its JAX job", _run),
    "demo": ("start a daemon and a small JAX training job on CPU to see xmon live", _demo),
    "monitor": ("print a JSON report per period, one a line (like neuron-monitor)", _monitor),
    "top": ("interactive full-screen view of devices, jobs, programs and compiles", _top),
    "ls": ("list this host's TPUs and GPUs (like neuron-ls / tpu-info)", _ls),
    "install-service": ("install the daemon as a hardened systemd service", _install_service),
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(
        prog="xmon", description="PJRT device profiler and monitoring daemon for JAX jobs."
    )
    parser.add_argument("--version", action="version", version=f"xmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Handler] = {}
    for name, (text, setup) in SUBCOMMANDS.items():
        handlers[name] = setup(sub.add_parser(name, help=text, description=text))
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
