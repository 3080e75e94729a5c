"""The commands speak one language: the same flags for the same things, help that shows the
default socket, usage errors from the subcommand with the nearest option."""

from __future__ import annotations

import argparse

import pytest

from xmon.cli.main import SUBCOMMANDS, build_parser


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser, _ = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}


def test_socket_help_is_worded_alike_and_shows_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMON_SOCKET", "/run/test-xmon/x.sock")
    helps = {}
    for name, parser in subparsers().items():
        action = next((a for a in parser._actions if "--socket" in a.option_strings), None)
        if action is not None:
            helps[name] = str(action.help)
    assert set(helps) >= {"daemon", "capture", "programs", "run", "demo", "monitor", "top", "ls"}
    for name, text in helps.items():
        assert "(default: $XMON_SOCKET, else /run/test-xmon/x.sock" in text, (name, text)


def test_config_and_job_flags_are_spelled_alike() -> None:
    parsers = subparsers()
    for name in ("daemon", "ls", "monitor"):
        assert "--config" in options(parsers[name]), name
        assert "--config-file" not in options(parsers[name]), name
    for name in ("run", "capture", "programs", "monitor"):
        assert "--job" in options(parsers[name]) and "--job-name" not in options(parsers[name])
    # The old spellings still work for scripts written against them.
    assert parsers["run"].parse_args(["--job-name", "t", "--", "x"]).job == "t"
    assert parsers["monitor"].parse_args(["--config-file", "f.toml"]).config_file.name == "f.toml"
    assert set(SUBCOMMANDS) == set(parsers)


def test_capture_lines_say_what_was_recorded_and_how_long_the_request_took() -> None:
    from xmon.cli.capture import describe
    from xmon.wire.client import CaptureResult

    trace = CaptureResult("demo", 7, "trace", "/l", "/l/demo-7", ("/l/a.xplane.pb",),
                          "recorded 3.0 s of trace", 10.84)  # fmt: skip
    assert describe(trace).splitlines()[0] == (
        "traced job 'demo' (pid 7): recorded 3.0 s of trace; 10.8 s from request to files"
    )
    memory = CaptureResult("demo", 7, "memory", "/l", "/l/demo-7", ("/l/m.prof",),
                           "memory profile saved in 0.001 s", 0.0123)  # fmt: skip
    assert describe(memory).splitlines()[0] == (
        "saved the device memory profile of job 'demo' (pid 7) in 12 ms"
    )
