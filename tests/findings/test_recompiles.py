"""The recompile rules: steady state, what changed between compiles, and the finding."""

from __future__ import annotations

import pytest

from xmon.findings.recompiles import (
    STORM_ERROR,
    FunctionCompiles,
    FunctionTable,
    argument_text,
    describe_change,
    detect_recompiles,
    is_steady,
)

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
