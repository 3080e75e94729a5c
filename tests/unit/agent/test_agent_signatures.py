"""The agent's text of a compile's arguments: every leaf up to the compared bound, the rest by
a digest that changes when one of them does."""

from __future__ import annotations

import jax.numpy as jnp
from jax.core import ShapedArray

from xmon.agent.signatures import _arguments
from xmon.analysis.compiles import ARGUMENTS_PAST, MAX_COMPARED


def test_every_leaf_is_described_and_the_rest_by_a_digest() -> None:
    avals = tuple(ShapedArray((8,), jnp.float32) for _ in range(MAX_COMPARED + 10))
    texts = _arguments(avals, ())
    assert len(texts) == MAX_COMPARED + 1 and texts[0] == "float32[8]"
    assert texts[-1].startswith(f"{ARGUMENTS_PAST}10 more arguments (digest ")
    changed = (*avals[:-1], ShapedArray((9,), jnp.float32))
    assert _arguments(changed, ())[-1] != texts[-1]
    assert _arguments(avals, ())[-1] == texts[-1]  # the same arguments, the same digest


def test_a_model_s_leaves_are_all_described() -> None:
    avals = (*(ShapedArray((16, 16), jnp.float32) for _ in range(97)),
             ShapedArray((8, 33), jnp.int32))  # fmt: skip
    assert _arguments(avals, ())[97] == "int32[8,33]"
