"""The commands speak one language: the same flags for the same things, help that shows the
default socket, usage errors from the subcommand with the nearest option."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from xmon.cli.main import SUBCOMMANDS, build_parser

from procs import REPO, base_env


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


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["daemon", "--perod", "1"], "xmon daemon: error: unrecognized arguments: --perod 1 "
                                     "(did you mean --period?)"),
        (["programs", "--jbo", "x"], "xmon programs: error: unrecognized arguments: --jbo x "
                                     "(did you mean --job?)"),
        (["ls", "--zzz"], "xmon ls: error: unrecognized arguments: --zzz"),
    ],
)  # fmt: skip
def test_a_mistyped_option_names_the_subcommand_and_the_nearest_option(
    args: list[str], expected: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xmon", *args], env=base_env(), cwd=REPO,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: xmon {args[0]} ")
    assert result.stderr.rstrip().endswith(expected)


def test_capture_lines_say_what_was_recorded_and_how_long_the_request_took() -> None:
    from xmon.cli.capture import describe
    from xmon.views.client import CaptureResult

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


@pytest.mark.e2e
def test_an_unwritable_logdir_is_refused_at_start(tmp_path: Path) -> None:
    """Not accepted at start and warned about only when a job attaches."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "xmon", "daemon", "--logdir", str(blocker / "tb"),
         "--socket", str(tmp_path / "xmon.sock"), "--listen", "127.0.0.1:0"],
        env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        f"xmon daemon: --logdir {blocker / 'tb'}: not writable (Not a directory); "
        "pass a directory this user can write\n"
    )
    assert not (tmp_path / "xmon.sock").exists()
