"""GEMM custom-call FLOPs from optimized HLO text: fixtures, real CPU HLO, malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmon.hlo import (
    GEMM_CALL_TARGETS,
    GemmCall,
    custom_call_gemm_flops,
    find_gemm_custom_calls,
    gemm_custom_call_count,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hlo"

# (fixture, FLOPs of one run, GEMMs executed per run, GEMM instructions in the text)
FIXTURE_CASES = [
    ("cublas_gemm_f32_4096.txt", 2 * 4096**3, 1, 1),
    ("cublas_gemm_inline_operand_shapes.txt", 2 * 2 * 2048**3, 2, 2),
    (
        "cublas_gemm_legacy_batched_transposed.txt",
        2 * (8 * 1024 * 512) * 256 + 2 * 16 * 256 * 512,
        2,
        2,
    ),
    (
        "cublaslt_while_conditional.txt",
        2 * 1024 * 4096 * 2048 + 2 * 256 * 1024 * 512 + 2 * 128**3,
        3,
        4,
    ),
]


@pytest.mark.parametrize(("name", "flops", "count", "instructions"), FIXTURE_CASES)
def test_fixture(name: str, flops: int, count: int, instructions: int) -> None:
    text = (FIXTURES / name).read_text()
    assert custom_call_gemm_flops(text) == flops
    assert gemm_custom_call_count(text) == count
    assert len(find_gemm_custom_calls(text)) == instructions


def test_4096_case_matches_the_known_undercount() -> None:
    text = (FIXTURES / "cublas_gemm_f32_4096.txt").read_text()
    assert custom_call_gemm_flops(text) == 137438953472
    assert find_gemm_custom_calls(text) == [
        GemmCall("custom-call.1", "main.2", "__cublas$gemm", 137438953472.0)
    ]


def test_every_fixture_says_where_its_form_comes_from() -> None:
    paths = sorted(FIXTURES.glob("*.txt"))
    assert len(paths) >= 3
    for path in paths:
        header = path.read_text().splitlines()[0]
        assert header.startswith("//"), path.name


@pytest.mark.parametrize(("name", "flops", "count", "instructions"), FIXTURE_CASES)
def test_the_module_proto_gives_the_texts_gemms(
    name: str, flops: int, count: int, instructions: int
) -> None:
    """Each fixture as the HloModuleProto XLA's parser makes of it (what the agent reads): the
    same FLOPs, counted from the proto's shapes and its JSON backend_config."""
    from xmon.agent import internals
    from xmon.hlo.proto import read_module

    text = (FIXTURES / name).read_text()
    serialized = internals.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    module = read_module(bytes(serialized))
    assert module is not None
    totals = [module.totals(root) for root in module.roots()]
    assert sum(t.flops for t in totals) == flops and sum(t.count for t in totals) == count
    assert len(list(module.gemm_calls())) == instructions


def test_modules_joined_in_one_text_add_up() -> None:
    first = (FIXTURES / "cublas_gemm_f32_4096.txt").read_text()
    second = (FIXTURES / "cublas_gemm_inline_operand_shapes.txt").read_text()
    joined = first + "\n" + second
    assert custom_call_gemm_flops(joined) == 2 * 4096**3 + 2 * 2 * 2048**3
    assert gemm_custom_call_count(joined) == 3


def test_targets_are_xlas_cublas_gemm_targets() -> None:
    assert {"__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8"} <= GEMM_CALL_TARGETS
    assert "__cublas$triangularSolve" not in GEMM_CALL_TARGETS


# --- real HLO from jax on this machine's CPU backend -----------------------------------------


def _cpu_texts() -> list[str]:
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones((256, 256), jnp.float32)

    def loop(a: object, b: object) -> object:
        return jax.lax.fori_loop(0, 3, lambda i, acc: acc @ b, a)

    functions = [
        lambda a, b: jnp.tanh(a @ b).sum(),
        loop,
        lambda a, b: jnp.einsum("ij,kj->ik", a, b),
    ]
    return [jax.jit(f).lower(x, x).compile().as_text() for f in functions]


def test_real_cpu_hlo_has_no_gemm_custom_calls() -> None:
    texts = _cpu_texts()
    for text in texts:
        assert "ENTRY" in text
        assert gemm_custom_call_count(text) == 0
        assert custom_call_gemm_flops(text) == 0.0
        assert find_gemm_custom_calls(text) == []
    assert custom_call_gemm_flops("\n".join(texts)) == 0.0


# --- small modules, one behaviour each --------------------------------------------------------


def _config(lhs: str = "1", rhs: str = "0", extra: str = "") -> str:
    """A gemm backend_config spread over lines, as XLA's tests write it."""
    return f"""backend_config={{"gemm_backend_config":{{
      "dot_dimension_numbers":{{
        "lhs_contracting_dimensions":["{lhs}"],"rhs_contracting_dimensions":["{rhs}"],
        "lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}{extra}}}}}"""


_CONFIG = _config()


def _module(lhs: str, rhs: str, out: str, target: str = "__cublas$gemm", config: str = _CONFIG):
    return f"""HloModule m
ENTRY %e {{
  %p0 = {lhs}{{1,0}} parameter(0)
  %p1 = {rhs}{{1,0}} parameter(1)
  %gemm = ({out}{{1,0}}, s8[1024]{{0}}) custom-call(%p0, %p1),
    custom_call_target="{target}", {config}
  ROOT %gte = {out}{{1,0}} get-tuple-element(%gemm), index=0
}}
"""


@pytest.mark.parametrize(
    ("text", "flops", "count"),
    [
        (_module("bf16[64,32]", "bf16[32,16]", "bf16[64,16]"), 2 * 64 * 16 * 32, 1),
        (_module("f16[64,32]", "f16[32,16]", "f16[64,16]"), 2 * 64 * 16 * 32, 1),
        (_module("f32[64,32]", "f32[32,16]", "f32[64,16]", "__cublas$lt$matmul"), 65536, 1),
        (
            _module("f8e4m3fn[64,32]", "f8e5m2[32,16]", "bf16[64,16]", "__cublas$lt$matmul$f8"),
            65536,
            1,
        ),
        # dynamic (bounded) and unknown dimensions: counted, no FLOPs
        (_module("f32[<=64,32]", "f32[32,16]", "f32[<=64,16]"), 0, 1),
        (_module("f32[64,?]", "f32[?,16]", "f32[64,16]"), 0, 1),
        # no dot_dimension_numbers to read: counted, no FLOPs
        (_module("f32[64,32]", "f32[32,16]", "f32[64,16]", config='backend_config={"x":1}'), 0, 1),
        (_module("f32[64,32]", "f32[32,16]", "f32[64,16]", config=""), 0, 1),
        # a contracting dimension the lhs does not have
        (
            _module(
                "f32[64,32]",
                "f32[32,16]",
                "f32[64,16]",
                config=_CONFIG.replace('["1"]', '["5"]', 1),
            ),
            0,
            1,
        ),
        # not GEMMs
        (_module("f32[64,32]", "f32[32,16]", "f32[64,16]", "__cudnn$convForward"), 0, 0),
        (_module("f32[64,32]", "f32[32,16]", "f32[64,16]", "__cublas$triangularSolve"), 0, 0),
        (_module("f32[64,32]", "f32[32,16]", "f32[64,16]", "__cublas$gemmX"), 0, 0),
    ],
)
def test_small_modules(text: str, flops: int, count: int) -> None:
    assert custom_call_gemm_flops(text) == flops
    assert gemm_custom_call_count(text) == count


def test_block_scaled_mx_gemm() -> None:
    text = f"""HloModule mx
ENTRY %e {{
  %a = f8e4m3fn[256,512]{{1,0}} parameter(0)
  %b = f8e4m3fn[1024,512]{{1,0}} parameter(1)
  %sa = f8e8m0fnu[256,16]{{1,0}} parameter(2)
  %sb = f8e8m0fnu[1024,16]{{1,0}} parameter(3)
  %mx = (bf16[256,1024]{{1,0}}, s8[33554432]{{0}}) custom-call(%a, %b, %sa, %sb),
    custom_call_target="__cublas$lt$matmul$mx", {_config(rhs="1", extra=',"scale_mode":2')}
  ROOT %out = bf16[256,1024]{{1,0}} get-tuple-element(%mx), index=0
}}
"""
    assert custom_call_gemm_flops(text) == 2 * 256 * 1024 * 512


# Form of XLA's GroupedGemmRewriteTest (ragged-dot lowered to a grouped cuBLASLt/hipBLASLt call).
_GROUPED = """HloModule grouped
ENTRY %e {
  %p0 = f16[64,9]{1,0} parameter(0)
  %p1 = f16[2,9,8]{2,1,0} parameter(1)
  %p2 = s32[2]{0} constant({16, 48})
  %g = (f16[64,8]{1,0}, s8[33554432]{0}) custom-call(f16[64,9]{1,0} %p0,
      f16[2,9,8]{2,1,0} %p1, s32[2]{0} %p2),
    custom_call_target="__cublas$lt$groupedMatmul",
    backend_config={"grouped_gemm_backend_config":{
      "gemm_backend_config":{"dot_dimension_numbers":{
        "lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],
        "lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}},
      "ragged_dot_dimension_numbers":{"dot_dimension_numbers":{
        "lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],
        "lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},
        "lhs_ragged_dimensions":["RAGGED"],"rhs_group_dimensions":["0"]}}}
  ROOT %out = f16[64,8]{1,0} get-tuple-element(%g), index=0
}
"""


def test_grouped_gemm_ragged_rows_count_every_row_once() -> None:
    # Each of the 64 lhs rows meets one group's 9x8 matrix: 2 * 64 * 8 * 9.
    assert custom_call_gemm_flops(_GROUPED.replace('"RAGGED"', '"0"')) == 2 * 64 * 8 * 9


def test_grouped_gemm_ragged_contracting_dimension_is_not_guessed() -> None:
    text = _GROUPED.replace('"RAGGED"', '"1"')
    assert custom_call_gemm_flops(text) == 0
    assert gemm_custom_call_count(text) == 1
    assert find_gemm_custom_calls(text)[0].flops is None


def test_fusion_called_twice_counts_twice_and_async_once() -> None:
    # The metadata string names computations too; only real call attributes may count.
    text = f"""HloModule calls
%inner (p: f32[32,32]) -> f32[32,32] {{
  %p = f32[32,32]{{1,0}} parameter(0)
  %gemm = (f32[32,32]{{1,0}}, s8[64]{{0}}) custom-call(f32[32,32]{{1,0}} %p, f32[32,32]{{1,0}} %p),
    custom_call_target="__cublas$gemm", {_CONFIG}
  ROOT %gte = f32[32,32]{{1,0}} get-tuple-element(%gemm), index=0
}}
ENTRY %e (x: f32[32,32]) -> f32[32,32] {{
  %x = f32[32,32]{{1,0}} parameter(0)
  %a = f32[32,32]{{1,0}} fusion(%x), kind=kCustom, calls=%inner,
    metadata={{op_name="calls=%inner body=%inner"}}
  %b = f32[32,32]{{1,0}} call(%a), to_apply=%inner
  %start = ((f32[32,32]{{1,0}}), f32[32,32]{{1,0}}, s32[]) async-start(%b), calls=%inner
  ROOT %done = f32[32,32]{{1,0}} async-done(%start), calls=%inner
}}
"""
    assert gemm_custom_call_count(text) == 3
    assert custom_call_gemm_flops(text) == 3 * 2 * 32**3
    assert len(find_gemm_custom_calls(text)) == 1


def test_instructions_without_module_or_entry_are_still_read() -> None:
    lines = _module("f32[64,32]", "f32[32,16]", "f32[64,16]").splitlines()[2:-2]
    text = "\n".join(lines)
    assert custom_call_gemm_flops(text) == 2 * 64 * 16 * 32


def test_computations_calling_each_other_in_a_cycle_do_not_loop() -> None:
    text = """HloModule cyclic
%a (p: f32[2]) -> f32[2] {
  ROOT %x = f32[2]{0} call(%p), to_apply=%b
}
%b (p: f32[2]) -> f32[2] {
  ROOT %y = f32[2]{0} call(%p), to_apply=%a
}
ENTRY %e (p: f32[2]) -> f32[2] {
  ROOT %z = f32[2]{0} call(%p), to_apply=%a
}
"""
    assert custom_call_gemm_flops(text) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "not hlo at all {{{ ((( ]]]",
        "HloModule m\nENTRY %e {\n  %g = (f32[2,2]{1,0} custom-call(%a), custom_call_target=",
        '%g = f32[2,2] custom-call(, custom_call_target="__cublas$gemm"',
        '%g = f32[2,2] custom-call(%a) custom_call_target="__cublas$gemm" '
        "lhs_contracting_dimensions",
        '%g = f32[] custom-call(%a), custom_call_target="__cublas$gemm", '
        'backend_config={"lhs_contracting_dimensions":["0"]}',
        "}}}}\n)))\nENTRY {",
        "\x00\xff\ufffd",
    ],
)
def test_malformed_text_never_raises(text: str) -> None:
    assert custom_call_gemm_flops(text) >= 0.0
    assert gemm_custom_call_count(text) >= 0
    assert isinstance(find_gemm_custom_calls(text), list)


@pytest.mark.parametrize("value", [None, b"HloModule m", 42, ["HloModule"]])
def test_non_text_gives_zero(value: object) -> None:
    assert custom_call_gemm_flops(value) == 0.0  # type: ignore[arg-type]
    assert gemm_custom_call_count(value) == 0  # type: ignore[arg-type]
    assert find_gemm_custom_calls(value) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [case[0] for case in FIXTURE_CASES])
def test_truncated_fixtures_never_raise(name: str) -> None:
    text = (FIXTURES / name).read_text()
    expected = custom_call_gemm_flops(text)
    for cut in range(0, len(text), 61):
        flops = custom_call_gemm_flops(text[:cut])
        assert 0.0 <= flops <= expected
