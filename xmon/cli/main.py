"""``xmon`` command line: one subcommand per module under xmon.cli.

Imports stay inside the subcommands so ``xmon daemon`` and the views never import jax.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from xmon import __version__

Handler = Callable[[argparse.Namespace], int]

# name -> (help, module with add_arguments(parser) and main(args) -> int)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "daemon": ("run the per-host monitoring daemon", "xmon.cli.daemon"),
    "capture": ("record a trace or memory profile inside a running JAX job", "xmon.cli.capture"),
    "programs": (
        "list the compiled XLA programs of the jobs, or print one's HLO",
        "xmon.cli.programs",
    ),
    "run": ("run a command with the xmon agent attached to its JAX job", "xmon.cli.run"),
    "demo": (
        "start a daemon and a small JAX training job on CPU to see xmon live",
        "xmon.cli.demo",
    ),
    "monitor": (
        "print a JSON report per period, one a line (like neuron-monitor)",
        "xmon.cli.monitor",
    ),
    "top": (
        "interactive full-screen view of devices, jobs, programs and compiles",
        "xmon.cli.top",
    ),
    "ls": ("list this host's TPUs and GPUs (like neuron-ls / tpu-info)", "xmon.cli.ls"),
    "doctor": ("diagnose the attached jobs: each finding's evidence and fix", "xmon.cli.doctor"),
    "fleet": (
        "every process of multi-host jobs, from Prometheus: stragglers, hangs, dropouts",
        "xmon.cli.fleet",
    ),
    "install-service": (
        "install the daemon as a hardened systemd service",
        "xmon.cli.install_service",
    ),
}


def _setup(module_name: str, parser: argparse.ArgumentParser) -> Handler:
    module = importlib.import_module(module_name)
    module.add_arguments(parser)
    return module.main  # type: ignore[no-any-return]


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    """The whole command line; with ``only``, just that subcommand's module is imported (the
    others keep their one-line help), so a command starts without loading all the others."""
    parser = argparse.ArgumentParser(
        prog="xmon", description="PJRT device profiler and monitoring daemon for JAX jobs."
    )
    parser.add_argument("--version", action="version", version=f"xmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers: dict[str, Handler] = {}
    for name, (text, module_name) in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=text, description=text)
        if only is None or name == only:
            handlers[name] = _setup(module_name, subparser)
    return parser, handlers


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (options before it take no values)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int | str | None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            code: int | str | None = _dispatch(argv)
        except SystemExit as exit_:  # argparse's --help, --version and usage errors
            code = exit_.code
        sys.stdout.flush()  # here, so a reader that has gone is seen inside the try
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _dispatch(argv: list[str]) -> int:
    command = _command(argv)
    if command == "daemon":  # before the imports below: a SIGHUP then must not kill it
        from xmon.daemon.lifecycle import defer_hangup
        from xmon.daemon.memory import choose_grpc_poller

        defer_hangup()
        choose_grpc_poller()  # before gRPC is imported
    parser, handlers = build_parser(only=command)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unrecognized(parser, args.command, unknown)
    if args.command is None:
        parser.print_help()
        return 2
    return handlers[args.command](args)


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, unknown: list[str]) -> None:
    """Usage error from the subcommand's own parser (its usage, not the top level's), with the
    nearest option it has: ``xmon daemon --perod 1`` suggests ``--period``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            parser = action.choices[command]
    options = [o for a in parser._actions for o in a.option_strings if a.help != argparse.SUPPRESS]
    message = f"unrecognized arguments: {' '.join(unknown)}"
    flag = next((u.split("=")[0] for u in unknown if u.startswith("-")), None)
    close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6) if flag else []
    parser.error(message + (f" (did you mean {close[0]}?)" if close else ""))


def _reader_gone() -> int:
    """``xmon programs | head -3``: the reader closed the pipe, which is how it says it has read
    enough. End quietly and with 0 (so ``set -o pipefail`` scripts go on); stdout goes to
    /dev/null so the interpreter's own flush at exit cannot raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


if __name__ == "__main__":
    sys.exit(main())
