"""A capture says what it waits for: the CLI's progress line, and the agent's account of where
the request's time went (starting the trace, writing it)."""

from __future__ import annotations

import io
import queue
import re
from pathlib import Path
from typing import Any

import pytest

from xmon.agent.commands import CommandRunner
from xmon.cli.capture import progress
from xmon.views.capture import progress_line
from xmon.wire.proto import xmon_pb2


@pytest.mark.parametrize(
    ("elapsed", "duration", "expected"),
    [
        (0.4, 3.0, "tracing … 0 s of 3 s"),
        (2.6, 3.0, "tracing … 3 s of 3 s"),
        (4.2, 3.0, "writing the trace … 4 s (the job exports what it recorded; slower while "
                   "its host is busy)"),
        (1.0, 0.0, "saving the device memory profile … 1 s"),
    ],
)  # fmt: skip
def test_progress_line_says_what_the_capture_waits_for(
    elapsed: float, duration: float, expected: str
) -> None:
    assert progress_line(elapsed, duration) == expected


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_rewritten_in_place_on_a_terminal_and_cleared() -> None:
    out = Tty()
    with progress(out, 3.0, every=0.01):
        import time

        time.sleep(0.1)
    text = out.getvalue()
    assert "\r\x1b[Ktracing … 0 s of 3 s" in text and text.endswith("\r\x1b[K")


def test_progress_is_not_written_to_logs_or_pipes() -> None:
    out = io.StringIO()
    with progress(out, 3.0, every=0.01):
        pass
    assert out.getvalue() == ""


def test_the_agent_says_when_the_trace_started_and_how_long_writing_took(tmp_path: Path) -> None:
    import jax.numpy as jnp

    replies: queue.Queue[Any] = queue.Queue()
    runner = CommandRunner(replies.put)
    (jnp.ones((64, 64)) @ jnp.ones((64, 64))).block_until_ready()
    trace = xmon_pb2.StartTrace(duration_ms=300, log_dir=str(tmp_path / "run"))
    runner.submit(xmon_pb2.DaemonCommand(command_id=1, start_trace=trace))
    done = replies.get(timeout=120)
    assert done.ok, done.message
    pattern = r"recorded \d\.\d s of trace \(started \d+ ms after the request reached the job, "
    assert re.match(pattern + r"written in (\d+ ms|\d+\.\d s)\)$", done.message), done.message
