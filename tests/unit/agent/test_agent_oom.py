"""The agent's out-of-memory report, in this process with real JAX on CPU: a real
RESOURCE_EXHAUSTED (an output of 16 TiB), seen leaving a step, by the chained excepthooks of
an uncaught error (the hooks that were there still run) and not at all for other errors."""

from __future__ import annotations

import sys

import pytest

from xmon.agent.oom import failed_allocation, pick_program
from xmon.model import Program
from xmon.wire.proto import xmon_pb2


@pytest.mark.parametrize(
    ("message", "size"),
    [
        ("RESOURCE_EXHAUSTED: Out of memory allocating 17592186044416 bytes.", 1 << 44),
        ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.", 1 << 34),
        ("RESOURCE_EXHAUSTED: Attempting to allocate 16.00G. That was not possible.", 16 << 30),
        ("RESOURCE_EXHAUSTED: ran out", None),
    ],
)
def test_the_failed_allocation_is_read_from_the_message(message: str, size: int | None) -> None:
    assert failed_allocation(message) == size


def test_the_program_is_the_named_one_then_the_matching_size_then_the_latest() -> None:
    a = Program("a", "jit_a", output_bytes=100, compiled_at=1.0)
    b = Program("b", "jit_b", temp_bytes=50, compiled_at=2.0)
    assert pick_program([a, b], "while running jit_a: out of memory", 50)[0] is a
    assert pick_program([a, b], "out of memory", 100) == (a, "allocation size matches its "
                                                          "memory analysis")  # fmt: skip
    assert pick_program([a, b], "out of memory", 7) == (b, "last program compiled")
    assert pick_program([], "out of memory", 7) == (None, "")


def test_uninstall_leaves_a_hook_chained_after_ours() -> None:
    from xmon.agent.oom import OomWatch

    watch = OomWatch(list, lambda p: xmon_pb2.ProgramInfo(), lambda r: True)
    before = sys.excepthook
    watch.install()
    ours = sys.excepthook
    assert ours is not before

    def later(*args: object) -> None:
        ours(*args)  # type: ignore[arg-type]

    sys.excepthook = later
    watch.uninstall()
    assert sys.excepthook is later  # someone chained after us: the chain stays intact
    sys.excepthook = before
