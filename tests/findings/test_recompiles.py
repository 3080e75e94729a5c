"""The recompile rules: steady state, what changed between compiles, and the finding."""

from __future__ import annotations

import pytest

from xmon.analysis import compiles
from xmon.analysis.compiles import (
    ARGUMENTS_PAST,
    MAX_ARGUMENTS,
    FunctionTable,
    argument_text,
    describe_change,
    is_steady,
)
from xmon.findings.recompiles import STORM_ERROR, FunctionCompiles, detect_recompiles

F32_8 = argument_text("float32[8]", False, None)
F32_9 = argument_text("float32[9]", False, None)
I32_8 = argument_text("int32[8]", False, None)
SCALAR = argument_text("float32[]", False, None)
WEAK = argument_text("float32[]", True, None)
SHARDED = argument_text("float32[8]", False, "PartitionSpec('x',) mesh={'x': 4}")


@pytest.mark.parametrize(
    ("eager", "recompile", "steps", "marked", "age", "steady"),
    [
        (False, True, 3, True, 0.0, True),  # past warm-up
        (False, True, 2, True, 99.0, False),  # marked: steps decide, not time
        (True, True, 100, True, 99.0, False),  # eager primitives never count
        (False, False, 100, True, 99.0, False),  # a first compile is no recompile
        (False, True, 0, False, 31.0, True),  # no markers: time since the first compile
        (False, True, 0, False, 5.0, False),
    ],
)
def test_steady_state(
    eager: bool, recompile: bool, steps: int, marked: bool, age: float, steady: bool
) -> None:
    assert is_steady(eager, recompile, steps, marked, age) is steady


@pytest.mark.parametrize(
    ("before", "after", "same_program", "kind"),
    [
        ((F32_8,), (F32_9,), False, "shape"),
        ((F32_8,), (I32_8,), False, "dtype"),
        ((F32_8, WEAK), (F32_8, SCALAR), True, "weak_type"),
        ((F32_8,), (SHARDED,), False, "sharding"),
        ((F32_8,), (F32_8, F32_8), False, "arguments"),
        ((F32_8,), (F32_8,), False, "static"),
        ((F32_8,), (F32_8,), True, "function"),
    ],
)
def test_what_changed(
    before: tuple[str, ...], after: tuple[str, ...], same_program: bool, kind: str
) -> None:
    assert describe_change(before, after, same_program).startswith(kind + ":")


def test_shape_change_names_the_argument() -> None:
    change = describe_change((SCALAR, F32_8), (SCALAR, F32_9), False)
    assert change == "shape: arg 1 float32[8] -> float32[9]"


def test_a_batch_after_a_model_s_leaves_is_compared_whole() -> None:
    """A step of params, an optimizer state (97 leaves) and a batch: the batch's shape
    change was past the 32 arguments compared and was called "static"."""
    table = FunctionTable()
    leaves = (F32_8,) * 97
    for n, length in enumerate((32, 33)):
        batch = argument_text(f"int32[8,{length}]", False, None)
        table.record("jit_train_step", (*leaves, batch), str(n), False, float(n), 5 + n, True)
    row = table.rows["jit_train_step"]
    assert row.changes[-1] == "shape: arg 97 int32[8,32] -> int32[8,33]"
    assert len(row.arguments) == MAX_ARGUMENTS  # what the report carries stays bounded


def test_arguments_past_those_compared_are_compared_by_their_digest() -> None:
    rest = (f"{ARGUMENTS_PAST}12 more arguments (digest 1)", f"{ARGUMENTS_PAST}12 more "
            "arguments (digest 2)")  # fmt: skip
    change = describe_change((F32_8, rest[0]), (F32_8, rest[1]), False)
    assert change.startswith("argument: ") and "past 1" in change
    assert describe_change((F32_8, rest[0]), (F32_9, rest[1]), False).startswith("shape: ")


def test_the_arguments_kept_for_diffs_are_bounded_over_all_functions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compiles, "MAX_COMPARED_TOTAL", 100)
    table = FunctionTable()
    table.record("first", (F32_8,) * 90, "a", False, 0.0, 0, True)
    table.record("second", (F32_8,) * 90, "b", False, 0.0, 0, True)  # 10 left: keeps 32
    assert len(table.rows["first"].compared) == 90
    assert len(table.rows["second"].compared) == MAX_ARGUMENTS
    table.record("first", (F32_9,) * 40, "c", False, 1.0, 0, True)  # gives 50 back
    assert len(table.rows["first"].compared) == 40


def test_table_counts_steady_recompiles_and_keeps_changes() -> None:
    table = FunctionTable()
    table.record("jit_init", (F32_8,), "a", True, 0.0, 0, True)  # eager, at start
    table.record("jit_init", (F32_9,), "b", True, 1.0, 0, True)
    for n in range(6):  # a train step whose shape grows, past warm-up
        shape = argument_text(f"float32[{n + 1}]", False, None)
        table.record("jit_step", (shape,), str(n), False, 10.0 + n, 5 + n, True)
    rows = {row.name: row for row in table.recompiled()}
    assert rows["jit_step"].steady_recompiles_total == 5
    assert rows["jit_init"].steady_recompiles_total == 0
    assert table.steady_recompiles_total == 5 and table.eager_compiles_total == 2
    assert len(rows["jit_step"].changes) == 4  # the newest few
    assert list(rows)[0] == "jit_step"  # worst first


def fn(name: str, steady: int, change: str, eager: bool = False) -> FunctionCompiles:
    return FunctionCompiles(name, steady + 1, steady, eager, changes=(change,), arguments=(F32_8,))


@pytest.mark.parametrize(
    ("function", "severity", "fix_word"),
    [
        (fn("jit_step", 2, "shape: arg 0"), None, ""),
        (fn("jit_step", 3, "shape: arg 0"), "warning", "bucket"),
        (fn("jit_step", STORM_ERROR, "function: same"), "error", "outside the loop"),
        (fn("jit_step", 5, "weak_type: arg 1"), "warning", "Python scalars"),
        (fn("jit_add", 50, "shape: arg 0", eager=True), None, ""),
    ],
)
def test_recompile_finding(function: FunctionCompiles, severity: str | None, fix_word: str) -> None:
    found = detect_recompiles((function,), since=1.0)
    if severity is None:
        assert found == []
        return
    (finding,) = found
    assert (finding.kind, finding.severity, finding.subject) == ("recompile", severity, "jit_step")
    assert fix_word in finding.fix
    assert finding.value == function.steady_recompiles_total
    assert ("change 1", function.changes[0]) in finding.evidence
