"""Loop-aware program cost from optimized HLO text (xmon.execution.loop_cost), on hand-written
modules with a stand-in for XLA's cost analysis that counts like it: one FLOP per element of a
multiply, one transcendental per element of an exponential, one byte per instruction; a while
loop's body and condition once, a conditional's costliest branch, anything else called once."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from xmon.agent import internals
from xmon.execution.loop_cost import Cost, LoopCost, XlaCost, loop_cost, loop_cost_of_protos
from xmon.hlo import Module, callees, parse_modules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hlo"


def fake_xla_cost(module_given: str | bytes) -> dict[str, float]:
    """Counts multiplies, exponentials and instructions of the entry (a stand-in for XLA's
    cost analysis, as exact as the tests need); a module proto is printed by XLA first."""
    [module] = parse_modules(as_text(module_given))
    [entry] = [name for name, c in module.computations.items() if c.is_entry]
    flops, transcendentals, bytes_accessed = _fake(module, entry)
    return {"flops": flops, "transcendentals": transcendentals, "bytes accessed": bytes_accessed}


def _fake(module: Module, name: str) -> tuple[float, float, float]:
    total = [0.0, 0.0, 0.0]
    for instruction in module.computations[name].instructions:
        dims = instruction.shape.partition("[")[2].partition("]")[0]
        size = math.prod(int(d) for d in dims.split(",") if d.strip().isdigit())
        total[0] += size if instruction.opcode == "multiply" else 0
        total[1] += size if instruction.opcode == "exponential" else 0
        total[2] += 1
        names, one_of = callees(instruction)
        parts = [_fake(module, n) for n in names]
        if parts:
            combined = [max(p[k] for p in parts) if one_of else sum(p[k] for p in parts)
                        for k in range(3)]  # fmt: skip
            total = [a + b for a, b in zip(total, combined, strict=True)]
    return total[0], total[1], total[2]


# Every module here is costed in both forms the agent and users give: its text, and the
# HloModuleProto XLA's own parser makes of that text (what the agent reads from executables).
FORMS = ("text", "proto")


def as_proto(text: str) -> bytes:
    return bytes(internals.hlo_module_from_text(text).as_serialized_hlo_module_proto())


def as_text(module: str | bytes) -> str:
    if isinstance(module, str):
        return module
    return str(internals.hlo_module_from_proto(module).to_string())


def analyse(form: str, text: str, xla_cost: XlaCost | None, **bounds: int) -> LoopCost:
    """``text``'s loop cost read from the form given."""
    if form == "text":
        return loop_cost(text, xla_cost, **bounds)
    return loop_cost_of_protos([as_proto(text)], xla_cost, **bounds)


def counting(calls: list[str]):  # type: ignore[no-untyped-def]
    def cost(module: str | bytes) -> dict[str, float]:
        calls.append(as_text(module))
        return fake_xla_cost(module)

    return cost


def loop(
    prefix: str,
    size: int = 8,
    trips: int | None = 10,
    *,
    init: int = 0,
    bound: int = 10,
    step: str = "add(%{p}i, %{p}one)",
    compare: str = "compare(%{p}ci, %{p}n), direction=LT",
    cond_extra: str = "",
    body_extra: str = "",
) -> tuple[str, str]:
    """(computations of one counted loop, the while instruction that runs it) with names
    prefixed: the body multiplies an f32[size] once per trip."""
    annotation = f', backend_config={{"known_trip_count":{{"n":"{trips}"}}}}' if trips else ""
    p = prefix
    computations = f"""
%{p}body (s: (s32[], f32[{size}], s32[])) -> (s32[], f32[{size}], s32[]) {{
  %{p}s = (s32[], f32[{size}]{{0}}, s32[]) parameter(0)
  %{p}i = s32[] get-tuple-element(%{p}s), index=0
  %{p}x = f32[{size}]{{0}} get-tuple-element(%{p}s), index=1
  %{p}limit = s32[] get-tuple-element(%{p}s), index=2
  %{p}one = s32[] constant(1)
  %{p}minus_one = s32[] constant(-1)
  %{p}two = s32[] constant(2)
  %{p}next = s32[] {step.format(p=p)}
  %{p}y = f32[{size}]{{0}} multiply(%{p}x, %{p}x){body_extra}
  ROOT %{p}t = (s32[], f32[{size}]{{0}}, s32[]) tuple(%{p}next, %{p}y, %{p}limit)
}}

%{p}cond (s: (s32[], f32[{size}], s32[])) -> pred[] {{
  %{p}cs = (s32[], f32[{size}]{{0}}, s32[]) parameter(0)
  %{p}ci = s32[] get-tuple-element(%{p}cs), index=0
  %{p}climit = s32[] get-tuple-element(%{p}cs), index=2
  %{p}n = s32[] constant({bound}){cond_extra}
  ROOT %{p}lt = pred[] {compare.format(p=p)}
}}
"""
    while_ = f"""  %{p}zero = s32[] constant({init})
  %{p}start = s32[] copy(%{p}zero)
  %{p}limit0 = s32[] constant(3)
  %{p}init = (s32[], f32[{size}]{{0}}, s32[]) tuple(%{p}start, %{p}x0, %{p}limit0)
  %{p}w = (s32[], f32[{size}]{{0}}, s32[]) while(%{p}init), condition=%{p}cond, body=%{p}body{annotation}
  %{p}out = f32[{size}]{{0}} get-tuple-element(%{p}w), index=1"""  # noqa: E501
    return computations, while_


def program(*loops: tuple[str, str], size: int = 8, prefixes: tuple[str, ...] = ()) -> str:
    computations = "".join(c for c, _ in loops)
    whiles = "\n".join(w for _, w in loops)
    params = "\n".join(
        f"  %{p}x0 = f32[{size}]{{0}} parameter({k})" for k, p in enumerate(prefixes)
    )
    return f"""HloModule loops
{computations}
ENTRY %main (x: f32[{size}]) -> f32[{size}] {{
{params}
{whiles}
  ROOT %r = f32[{size}]{{0}} multiply(%{prefixes[0]}out, %{prefixes[0]}out)
}}
"""


def one_loop(**kwargs: object) -> str:
    return program(loop("a", **kwargs), prefixes=("a",))  # type: ignore[arg-type]


@pytest.mark.parametrize("form", FORMS)
def test_known_trip_count_weighs_the_body(form: str) -> None:
    result = analyse(form, one_loop(trips=10, bound=999), fake_xla_cost)
    [found] = result.loops
    assert (found.trip_count, found.source, found.body, found.condition) == (
        10, "known_trip_count", "abody", "acond",
    )  # fmt: skip
    assert result.extra is not None and result.extra.flops == 9 * 8  # XLA has the body once
    assert not result.lower_bound and result.unknown_trip_counts == 0
    # bytes: 10 body runs and 11 condition runs, XLA counted one of each
    assert result.extra.bytes_accessed == 9 * 10 + 10 * 5


@pytest.mark.parametrize(
    ("kwargs", "trips"),
    [
        ({}, 10),
        ({"init": 2, "step": "add(%{p}i, %{p}two)"}, 4),  # 2, 4, 6, 8
        ({"init": 2, "step": "add(%{p}two, %{p}i)", "bound": 9}, 4),  # step on the left
        ({"compare": "compare(%{p}ci, %{p}n), direction=LE"}, 11),
        ({"compare": "compare(%{p}n, %{p}ci), direction=GT"}, 10),  # bound on the left
        ({"compare": "compare(%{p}ci, %{p}n), direction=NE", "step": "add(%{p}i, %{p}two)"}, 5),
        (
            {
                "init": 10,
                "bound": 0,
                "step": "add(%{p}i, %{p}minus_one)",
                "compare": "compare(%{p}ci, %{p}n), direction=GT",
            },
            10,
        ),  # fmt: skip
        (
            {
                "init": 10,
                "bound": 0,
                "step": "subtract(%{p}i, %{p}one)",
                "compare": "compare(%{p}ci, %{p}n), direction=GE",
            },
            11,
        ),  # fmt: skip
        ({"init": 12}, 0),  # never runs
    ],
)
@pytest.mark.parametrize("form", FORMS)
def test_trip_count_from_the_condition(kwargs: dict[str, object], trips: int, form: str) -> None:
    result = analyse(form, one_loop(trips=None, **kwargs), fake_xla_cost)
    [found] = result.loops
    assert (found.trip_count, found.source) == (trips, "condition")
    assert result.extra is not None and result.extra.flops == (trips - 1) * 8


@pytest.mark.parametrize("form", FORMS)
def test_trip_count_through_fused_compare_and_add(form: str) -> None:
    # CPU XLA wraps the scalar compare and add in loop fusions (jax 0.10.2's scan, for one).
    fused = """
%fused_lt (p0: s32[], p1: s32[]) -> pred[] {
  %p0 = s32[] parameter(0)
  %p1 = s32[] parameter(1)
  ROOT %cmp = pred[] compare(%p0, %p1), direction=LT
}

%fused_add (q0: s32[], q1: s32[]) -> s32[] {
  %q0 = s32[] parameter(0)
  %q1 = s32[] parameter(1)
  ROOT %sum = s32[] add(%q0, %q1)
}
"""
    text = one_loop(
        trips=None,
        compare="fusion(%{p}ci, %{p}n), kind=kLoop, calls=%fused_lt",
        step="fusion(%{p}i, %{p}two), kind=kLoop, calls=%fused_add",
    ).replace("HloModule loops\n", "HloModule loops\n" + fused)
    [found] = analyse(form, text, fake_xla_cost).loops
    assert (found.trip_count, found.source) == (5, "condition")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"compare": "compare(%{p}ci, %{p}climit), direction=LT"},  # a bound from the data
        {"step": "multiply(%{p}i, %{p}two)"},  # not an induction variable
        {"step": "add(%{p}i, %{p}limit)"},  # a step from the data
        {"compare": "compare(%{p}ci, %{p}n), direction=LT", "step": "subtract(%{p}i, %{p}one)"},
        {"compare": "compare(%{p}ci, %{p}n), direction=EQ"},
    ],
)
@pytest.mark.parametrize("form", FORMS)
def test_unknown_trip_count_counts_the_body_once_and_is_a_lower_bound(
    kwargs: dict[str, object], form: str
) -> None:
    result = analyse(form, one_loop(trips=None, **kwargs), fake_xla_cost)
    [found] = result.loops
    assert (found.trip_count, found.source) == (None, "unknown")
    assert result.extra == Cost()  # what XLA counts, no more
    assert result.lower_bound and result.unknown_trip_counts == 1


@pytest.mark.parametrize("trips", [1 << 41, 10**400])
@pytest.mark.parametrize("form", FORMS)
def test_an_impossible_trip_count_is_unknown_not_infinite_flops(trips: int, form: str) -> None:
    """A trip count no program runs (an annotation from a hostile or broken job) is not
    believed: the body is counted once and the cost is a finite lower bound."""
    result = analyse(form, one_loop(trips=trips), fake_xla_cost)
    [found] = result.loops
    assert (found.trip_count, found.source) == (None, "unknown")
    assert result.lower_bound and result.extra == Cost()


@pytest.mark.parametrize("form", FORMS)
def test_the_condition_runs_once_more_than_the_body(form: str) -> None:
    probe = (
        "\n  %aprobe = f32[2]{0} constant({1, 2})\n  %asq = f32[2]{0} multiply(%aprobe, %aprobe)"
    )
    text = one_loop(trips=10, cond_extra=probe)
    result = analyse(form, text, fake_xla_cost)
    assert result.extra is not None and result.extra.flops == 9 * 8 + 10 * 2


def nested(outer_trips: int | None = 4, inner_trips: int = 3) -> str:
    """An outer loop whose body multiplies an f32[4] and runs an inner loop over an f32[8]."""
    inner_comps, inner_while = loop("in", size=8, trips=inner_trips)
    data_bound = "compare(%{p}ci, %{p}climit), direction=LT"  # the bound comes from the data
    outer_comps, outer_while = loop(
        "out", size=4, trips=outer_trips, **({} if outer_trips else {"compare": data_bound})
    )
    body_extra = "\n  %inx0 = f32[8]{0} constant({1, 2, 3, 4, 5, 6, 7, 8})\n" + inner_while
    outer_comps = outer_comps.replace(
        "multiply(%outx, %outx)", "multiply(%outx, %outx)" + body_extra, 1
    )
    return program((inner_comps + outer_comps, outer_while), size=4, prefixes=("out",))


@pytest.mark.parametrize("form", FORMS)
def test_nested_loops_multiply(form: str) -> None:
    calls: list[str] = []
    result = analyse(form, nested(4, 3), counting(calls))
    assert sorted((loop.name, loop.trip_count) for loop in result.loops) == [
        ("inw", 3), ("outw", 4),
    ]  # fmt: skip
    # truth 4 * (4 + 3 * 8) = 112; XLA counts 4 + 8 = 12
    assert result.extra is not None and result.extra.flops == 112 - 12
    assert len(calls) == 4, "X of both bodies and both conditions, never of the entry"
    assert all(text.count("ENTRY") == 1 for text in calls)


@pytest.mark.parametrize("form", FORMS)
def test_unknown_outer_trip_count_still_weighs_the_inner_loop(form: str) -> None:
    result = analyse(form, nested(None, 3), fake_xla_cost)
    assert result.extra is not None and result.extra.flops == (4 + 3 * 8) - 12
    assert result.lower_bound and result.unknown_trip_counts == 1


def _with_calls(caller: str) -> str:
    comps, while_ = loop("a", trips=5)
    return f"""HloModule calls
{comps}
%looping (x: f32[8]) -> f32[8] {{
  %ax0 = f32[8]{{0}} parameter(0)
{while_}
  ROOT %lr = f32[8]{{0}} copy(%aout)
}}

%plain (px: f32[16]) -> f32[16] {{
  %px = f32[16]{{0}} parameter(0)
  ROOT %pm = f32[16]{{0}} multiply(%px, %px)
}}

ENTRY %main (x: f32[8], y: f32[16], k: s32[]) -> f32[8] {{
  %x = f32[8]{{0}} parameter(0)
  %y = f32[16]{{0}} parameter(1)
  %k = s32[] parameter(2)
{caller}
}}
"""


@pytest.mark.parametrize("form", FORMS)
def test_loop_inside_a_conditional_branch(form: str) -> None:
    text = _with_calls(
        "  ROOT %c = f32[8]{0} conditional(%k, %x, %y), branch_computations={%looping, %plain}"
    )
    result = analyse(form, text, fake_xla_cost)
    assert [loop.computation for loop in result.loops] == ["looping"]
    # XLA: max(8, 16) = 16; loop-aware: max(5 * 8, 16) = 40
    assert result.extra is not None and result.extra.flops == 40 - 16


@pytest.mark.parametrize("form", FORMS)
def test_loop_inside_a_called_computation(form: str) -> None:
    text = _with_calls("  ROOT %c = f32[8]{0} call(%x), to_apply=%looping")
    result = analyse(form, text, fake_xla_cost)
    assert result.extra is not None and result.extra.flops == 4 * 8
    assert [loop.trip_count for loop in result.loops] == [5]


def _gemm_loop(trips: int) -> str:
    config = (
        'backend_config={"gemm_backend_config":{"dot_dimension_numbers":{'
        '"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],'
        '"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}'
    )
    gemm = (
        "\n  %ga = f32[64,32]{1,0} parameter(1)\n  %gb = f32[32,16]{1,0} parameter(2)\n"
        "  %g = (f32[64,16]{1,0}, s8[1024]{0}) custom-call(%ga, %gb), "
        f'custom_call_target="__cublas$gemm", {config}'
    )
    return one_loop(trips=trips, body_extra=gemm)


@pytest.mark.parametrize("form", FORMS)
def test_gemm_custom_calls_in_a_loop_body_count_once_per_trip(form: str) -> None:
    result = analyse(form, _gemm_loop(10), fake_xla_cost)
    assert result.custom_call_flops == 10 * 2 * 64 * 16 * 32
    assert result.extra is not None and result.extra.gemm_flops == 0.0, "reported whole"


@pytest.mark.parametrize("form", FORMS)
def test_gpu_fixture_gemms_in_loop_and_branches(form: str) -> None:
    text = (FIXTURES / "cublaslt_while_conditional.txt").read_text()
    result = analyse(form, text, None)  # no XLA cost: the GEMMs are still counted
    loop_gemm, entry_gemm, large_branch = 2 * 1024 * 4096 * 2048, 2 * 256 * 1024 * 512, 2 * 128**3
    assert result.custom_call_flops == 10 * loop_gemm + entry_gemm + large_branch
    assert [(loop.trip_count, loop.source) for loop in result.loops] == [(10, "known_trip_count")]
    assert result.extra is None and result.lower_bound, "XLA's own figure could not be rebuilt"


@pytest.mark.parametrize("form", FORMS)
def test_without_xla_cost_a_program_with_loops_is_a_lower_bound(form: str) -> None:
    result = analyse(form, one_loop(), None)
    assert result.extra is None and result.lower_bound and len(result.loops) == 1
    assert result.reason


@pytest.mark.parametrize("form", FORMS)
def test_xla_cost_that_fails_is_like_none(form: str) -> None:
    def broken(module: str | bytes) -> dict[str, float]:
        raise RuntimeError("INVALID_ARGUMENT: parse error")

    for failing in (broken, lambda text: None, lambda text: {"transcendentals": 1.0}):
        result = analyse(form, one_loop(), failing)
        assert result.extra is None and result.lower_bound


def test_no_loops_needs_no_xla_call() -> None:
    calls: list[str] = []
    text = _with_calls("  ROOT %c = f32[16]{0} call(%y), to_apply=%plain")
    text = text.replace("%looping", "%unused_loop")
    result = loop_cost(text.replace(" while(", " while ("), counting(calls))
    assert calls == [] and result.extra == Cost() and not result.lower_bound
    assert loop_cost("HloModule m\nENTRY %e { ROOT %p = f32[] parameter(0) }", None) == LoopCost(
        extra=Cost()
    )


@pytest.mark.parametrize("form", FORMS)
def test_too_many_xla_calls_gives_up_on_xlas_figures_but_not_on_gemms(form: str) -> None:
    result = analyse(form, _gemm_loop(10), fake_xla_cost, max_xla_calls=1)
    assert result.extra is None and result.lower_bound and "computations" in (result.reason or "")
    assert result.custom_call_flops == 10 * 2 * 64 * 16 * 32


def test_text_too_large_to_parse_is_scanned_for_loops_only() -> None:
    text = nested(4, 3)
    result = loop_cost(text, fake_xla_cost, max_text_chars=len(text) - 1)
    assert sorted(loop.trip_count or 0 for loop in result.loops) == [3, 4]
    assert result.extra is None and result.lower_bound
    assert loop_cost(text.replace(" while(", " call("), None, max_text_chars=10).extra == Cost()


def test_a_scanned_text_finds_the_loops_a_full_parse_finds() -> None:
    """The scan finds each loop's line by ``str.find``: the same loops, names and trip counts
    as the parse, first line and last line included."""
    text = nested(4, 3) + "\n" + one_loop(trips=7) + "\n" + one_loop(trips=5).rstrip("\n")
    scanned = loop_cost(text, None, max_text_chars=len(text) - 1).loops
    parsed = loop_cost(text, fake_xla_cost).loops
    assert sorted((loop.name, loop.trip_count) for loop in scanned) == sorted(
        (loop.name, loop.trip_count) for loop in parsed
    )
    assert len(scanned) == 4


def test_modules_joined_in_one_text_add_up() -> None:
    text = one_loop(trips=10) + "\n" + one_loop(trips=4)
    result = loop_cost(text, fake_xla_cost)
    assert result.extra is not None and result.extra.flops == 9 * 8 + 3 * 8
    assert len(result.loops) == 2


MALFORMED = [
    "",
    "not hlo at all {{{ ((( ]]]",
    "HloModule m\nENTRY %e {\n  %w = (s32[]) while(%t), condition=%missing, body=%gone\n}",
    "HloModule m\nENTRY %e {\n  %w = (s32[]) while(), condition=, body=\n}",
    "HloModule m\n%c (p: s32[]) -> pred[] {\n  ROOT %x = pred[] compare(%p), direction=LT\n}\n"
    "ENTRY %e {\n  %w = (s32[]) while(%t), condition=%c, body=%c\n}",
    "}}}}\n)))\nENTRY { while( while(",
    "\x00\xff\ufffd while(",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_text_never_raises(text: str) -> None:
    for cost in (None, fake_xla_cost):
        result = loop_cost(text, cost)
        assert isinstance(result, LoopCost)


def test_truncated_text_never_raises() -> None:
    text = nested(4, 3)
    for cut in range(0, len(text), 37):
        assert isinstance(loop_cost(text[:cut], fake_xla_cost), LoopCost)
    assert isinstance(loop_cost(None, fake_xla_cost), LoopCost)  # type: ignore[arg-type]


UNCOSTED = """HloModule m
ENTRY %e (p: f32[8,8]) -> f32[8,8] {
  %p = f32[8,8]{1,0} parameter(0)
  %s = f32[8,8]{1,0} custom-call(%p), custom_call_target="Sharding", sharding={replicated}
  ROOT %k = f32[8,8]{1,0} custom-call(%s), custom_call_target="%s"
}
"""


@pytest.mark.parametrize(
    ("target", "uncosted"),
    [("tpu_custom_call", ("tpu_custom_call",)), ("__gpu$xla.gpu.triton", ("__gpu$xla.gpu.triton",)),
     ("lapack_sgetrf_ffi", ("lapack_sgetrf_ffi",)), ("MoveToHost", ()),
     ("xla_ffi_python_cpu_callback", ())],
)  # fmt: skip
@pytest.mark.parametrize("form", FORMS)
def test_custom_calls_nobody_costs_make_a_lower_bound(
    target: str, uncosted: tuple[str, ...], form: str
) -> None:
    cost = analyse(form, UNCOSTED.replace('"%s"', f'"{target}"'), None)
    assert cost.uncosted_custom_calls == uncosted
    assert cost.lower_bound is bool(uncosted)


# --- module protos: what only the proto form has ------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00" * 64, b"\xff" * 64, bytes(range(256)), b"\x1a\x05\x12\x03\x12\x01\x00"],
    ids=["empty", "zeros", "ones", "every-byte", "nested-garbage"],
)
def test_a_malformed_module_proto_never_raises(data: bytes) -> None:
    for cost in (None, fake_xla_cost):
        assert isinstance(loop_cost_of_protos([data], cost), LoopCost)


def test_a_truncated_module_proto_never_raises() -> None:
    data = as_proto(nested(4, 3))
    results = [loop_cost_of_protos([data[:cut]], fake_xla_cost) for cut in range(0, len(data), 23)]
    assert all(isinstance(result, LoopCost) for result in results)
    assert any(result.reason for result in results), "a cut proto is said to be unreadable"


def test_modules_too_large_to_read_are_scanned_for_loops_only() -> None:
    data = as_proto(nested(4, 3))
    result = loop_cost_of_protos([data], fake_xla_cost, max_bytes=len(data) - 1)
    assert sorted(loop.trip_count or 0 for loop in result.loops) == [3, 4]
    assert result.extra is None and result.lower_bound and "bytes" in (result.reason or "")
    gemms = as_proto(_gemm_loop(10))
    scanned = loop_cost_of_protos([gemms], None, max_bytes=10)
    assert scanned.custom_call_flops is None and scanned.lower_bound, "GEMMs seen, not counted"


def test_the_modules_of_one_program_add_up() -> None:
    modules = [as_proto(one_loop(trips=10)), as_proto(one_loop(trips=4))]
    result = loop_cost_of_protos(modules, fake_xla_cost)
    assert result.extra is not None and result.extra.flops == 9 * 8 + 3 * 8
    assert len(result.loops) == 2


def test_a_cut_module_proto_is_accepted_by_xla_and_keeps_only_what_it_runs() -> None:
    """The module each loop body is costed in: XLA reads it back, its entry is the body, and
    it holds the body's callees but not the rest of the program."""
    from xmon.hlo.proto import read_module

    module = read_module(as_proto(nested(4, 3)))
    assert module is not None
    cut = module.with_entry("outbody")
    assert isinstance(cut, bytes)
    text = as_text(cut)
    assert "ENTRY %outbody" in text and "%inbody" in text and "%main" not in text
    assert module.with_entry("no such computation") is None


# --- conditionals: XLA counts the costliest branch ----------------------------------------------


def _conditional(second_branch: str) -> str:
    return f"""HloModule branches
%cheap (a: f32[8]) -> f32[8] {{
  %a = f32[8]{{0}} parameter(0)
  ROOT %am = f32[8]{{0}} multiply(%a, %a)
}}

%other (b: f32[8]) -> f32[8] {{
  %b = f32[8]{{0}} parameter(0)
{second_branch}
}}

ENTRY %main (x: f32[8], k: s32[]) -> f32[8] {{
  %x = f32[8]{{0}} parameter(0)
  %k = s32[] parameter(1)
  ROOT %c = f32[8]{{0}} conditional(%k, %x, %x), branch_computations={{%cheap, %other}}
}}
"""


SAME_WORK = "  ROOT %bm = f32[8]{0} multiply(%b, %b)"
MORE_WORK = "  %b1 = f32[8]{0} multiply(%b, %b)\n  ROOT %b2 = f32[8]{0} multiply(%b1, %b1)"


@pytest.mark.parametrize("form", FORMS)
def test_branches_that_do_different_work_make_an_upper_bound(form: str) -> None:
    uneven = analyse(form, _conditional(MORE_WORK), fake_xla_cost)
    assert uneven.uneven_conditionals == 1 and uneven.upper_bound and not uneven.lower_bound
    even = analyse(form, _conditional(SAME_WORK), fake_xla_cost)
    assert even.uneven_conditionals == 0 and not even.upper_bound


@pytest.mark.parametrize("form", FORMS)
def test_an_uneven_conditional_is_described_for_the_daemon_to_count_its_branches(
    form: str,
) -> None:
    """Each branch's cost, and the instructions whose events mark a run of it (its top-level
    ones that compute: not its parameter); what the figure counts is the costliest branch."""
    (conditional,) = analyse(form, _conditional(MORE_WORK), fake_xla_cost).conditionals
    assert conditional.name == "c"
    cheap, other = conditional.branches
    assert (cheap.flops, cheap.ops) == (8.0, ("am",))
    assert (other.flops, other.ops) == (16.0, ("b1", "b2"))
    assert conditional.counted_flops == 16.0
    assert conditional.counted_bytes_accessed == max(cheap.bytes_accessed, other.bytes_accessed)
    assert analyse(form, _conditional(SAME_WORK), fake_xla_cost).conditionals == ()
    # not costed: the bound stays, with nothing to count its branches by
    assert analyse(form, _conditional(MORE_WORK), None).conditionals == ()


@pytest.mark.parametrize("form", FORMS)
def test_branches_that_cannot_be_costed_are_not_shown_exact(form: str) -> None:
    assert analyse(form, _conditional(SAME_WORK), None).upper_bound
    assert analyse(form, _conditional(SAME_WORK), lambda module: None).upper_bound
