"""What a compile was for: its arguments and whether an eager primitive asked for it.

Read from the compiling thread's own stack, once per compile (compiles take milliseconds to
minutes; walking 40 frames takes microseconds). jax hands its lowering's abstract values and
shardings to ``pxla.UnloadedMeshExecutable.from_hlo`` (``global_in_avals``, ``in_shardings``),
which calls ``compile_or_get_cached`` two frames down; weak types are visible there and nowhere
in the lowered module. When a jax version names them differently the arguments are unknown
(empty) and the recompile finding says "static" or "function" instead of the argument.
"""

from __future__ import annotations

import inspect
from types import FrameType
from typing import Any

from xmon.agent import internals
from xmon.analysis.compiles import ARGUMENTS_PAST, MAX_COMPARED, argument_text

MAX_FRAMES = 64
# jax functions through which user code calls a jitted function it built (jax 0.4.30 - 0.10):
# the C++ dispatch path calls pjit's cache_miss, under traceback filtering.
_JIT_ENTRIES = frozenset({"cache_miss", "reraise_with_filtered_traceback", "compile"})
_JAX_PATHS = ("/jax/", "/jaxlib/", "/xmon/agent/")


def _is_library(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return any(part in filename for part in _JAX_PATHS)


def describe_compile(start: FrameType | None = None) -> tuple[tuple[str, ...], bool]:
    """(arguments, eager) of the compile running on this thread. ``eager``: the user's code
    called a jax operation (jnp.ones, x + 1, jax.random.normal), not a function it jitted."""
    if start is None:
        here = inspect.currentframe()
        try:
            start = here.f_back if here is not None else None
        finally:
            # A frame that refers to itself lives until the garbage collector runs, and with it
            # every array its callers hold (the inspect module's own advice).
            del here
    frame: FrameType | None = start
    arguments: tuple[str, ...] = ()
    entry: FrameType | None = None
    for _ in range(MAX_FRAMES):
        if frame is None:
            break
        if not arguments and frame.f_code.co_name == internals.ARGUMENTS_FRAME:
            arguments = _arguments(*internals.lowering_arguments(frame))
        if not _is_library(frame):
            break  # the innermost user frame: ``entry`` is where it called into jax
        entry, frame = frame, frame.f_back
    eager = entry is not None and frame is not None and entry.f_code.co_name not in _JIT_ENTRIES
    return arguments, eager


def _arguments(avals: tuple[Any, ...], shardings: tuple[Any, ...]) -> tuple[str, ...]:
    """Every argument's text up to ``MAX_COMPARED`` (a few microseconds each, on a compile of
    milliseconds or more); the rest as one text with their digest, so that a change among
    them is still seen as a change of an argument."""
    texts = []
    for index, aval in enumerate(avals[:MAX_COMPARED]):
        sharding = shardings[index] if index < len(shardings) else None
        texts.append(_one(aval, sharding))
    if len(avals) > MAX_COMPARED:
        texts.append(_rest(avals[MAX_COMPARED:], shardings[MAX_COMPARED:]))
    return tuple(texts)


def _rest(avals: tuple[Any, ...], shardings: tuple[Any, ...]) -> str:
    try:  # abstract values and shardings are hashable (jax's own caches key on them)
        digest = f"{hash((avals, shardings)) & (1 << 64) - 1:016x}"
    except TypeError:
        digest = "unknown"
    return f"{ARGUMENTS_PAST}{len(avals)} more arguments (digest {digest})"


def _one(aval: Any, sharding: Any) -> str:
    try:
        type_text = aval.str_short(short_dtypes=False)
    except Exception:  # noqa: BLE001 - an aval of another kind: its text still tells
        type_text = str(aval)
    return argument_text(type_text, bool(getattr(aval, "weak_type", False)), _sharding(sharding))


def _sharding(sharding: Any) -> str | None:
    """A short text of a concrete sharding; None when jax chose it (unspecified)."""
    if sharding is None or type(sharding).__name__ in ("UnspecifiedValue", "AUTO"):
        return None
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is not None and mesh is not None:
        shape = getattr(mesh, "shape", None)
        return f"{spec} mesh={dict(shape) if shape is not None else '?'}"
    return str(sharding)[:80]
