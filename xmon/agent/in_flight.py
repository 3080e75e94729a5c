"""Is another thread inside a call to a jitted function right now?

While a jitted call runs, the buffers it donated are already deleted and its outputs are not
yet ``jax.Array`` objects, so a walk of live arrays taken then misses the step's state. The
calling thread sits in that one C call with the GIL released, its top Python frame stopped on
the call instruction. Reading the loads of that call site in the frame's bytecode names the
callable; a jitted callable, or one that cannot be told, marks the moment as mid-dispatch.
Deciding wrongly "in flight" only costs a reading (the last one stands); the check never
calls user code (attributes are read with ``inspect.getattr_static``).

A library's jit wrapper (Flax NNX's ``nnx.jit``, an object holding its ``jax.jit`` function)
runs Python around the jitted call: it splits a module's state before and writes the new state
back into the module after, while the old is still alive (a reading there counted the model
and its optimizer twice). So the frames below the top count too: a thread is in flight while
any of its frames is stopped calling a jitted function or an object that holds one. The one
shape this costs readings in: an object holding a jitted function whose ``__call__`` runs the
whole training loop is "in flight" for as long as it runs, and a job without step markers that
trains so is read only outside it (a method of it, ``trainer.fit()``, is not such a call).
"""

from __future__ import annotations

import builtins
import dis
import functools
import inspect
import threading
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from xmon.agent import internals

_CALLS = frozenset(
    {"CALL", "PRECALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_FUNCTION_EX",
     "CALL_METHOD"}
)  # fmt: skip
_NAMES = frozenset({"LOAD_NAME", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF",
                    "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_BORROW",
                    "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})  # fmt: skip
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_UNKNOWN = object()
_JITTED_TYPES = frozenset({"PjitFunction", "PmapFunction"})

Load = tuple[str, str]  # ("name" | "attr", identifier)


def is_jitted(obj: Any) -> bool:
    """A jax.jit / pmap callable (a C++ function object from jaxlib)."""
    kind = type(obj)
    return kind.__name__ in _JITTED_TYPES and kind.__module__.startswith("jax")


@dataclass(frozen=True)
class CallSite:
    """What the source of a call loads: every name and attribute on its line up to the call
    (``loads``), and the loads of the called expression itself (``callee``: ``step`` in
    ``step(state, batch)``, ``self.jitted_fn`` in ``self.jitted_fn(*args)``), empty where
    the callee is not a chain of names and attributes (``fns[0](x)``, ``make()(x)``)."""

    loads: tuple[Load, ...]
    callee: tuple[Load, ...]


def _loads_of(ins: dis.Instruction) -> list[Load]:
    if ins.opname in _NAMES:  # a superinstruction loads two names at once
        names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
        return [("name", str(name)) for name in names]
    if ins.opname in _ATTRS:
        return [("attr", str(ins.argval))]
    return []


# Instructions that do not compute a value of their own: a callee's position may still be
# theirs (the null pushed beside it, keyword names).
_BESIDE = frozenset({"PUSH_NULL", "PRECALL", "KW_NAMES", "CACHE", "NOP", "EXTENDED_ARG"})


@functools.lru_cache(maxsize=2048)
def call_site(code: CodeType, lasti: int) -> CallSite | None:
    """The loads around the call at ``lasti``; None where the instruction there is not a call
    (the thread is not inside one).

    The callee is found by source position: the instructions that compute it start where the
    call expression starts and end before its end (its arguments start later). A chain of
    one name and its attributes names it; any other instruction among them (a subscript, a
    call) leaves it unnamed."""
    instructions = list(dis.get_instructions(code))
    here = next((i for i, ins in enumerate(instructions) if ins.offset == lasti), None)
    if here is None or instructions[here].opname not in _CALLS:
        return None
    call = instructions[here].positions
    line = call.lineno if call is not None else None
    loads: list[Load] = []
    callee: list[Load] | None = None
    for ins in instructions[:here]:
        at = ins.positions
        if at is None or at.lineno is None or at.lineno != line:
            continue
        loaded = _loads_of(ins)
        loads.extend(loaded)
        if call is None or at.col_offset != call.col_offset or ins.opname in _BESIDE:
            continue
        if (at.end_lineno, at.end_col_offset) == (call.end_lineno, call.end_col_offset):
            continue
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, tuple):
            continue  # a keyword call's names (3.13), at the callee's position
        if loaded and loaded[0][0] == "name":
            callee = loaded[:1]
        elif loaded and callee is not None:
            callee.append(loaded[0])
        else:
            callee = None
    return CallSite(tuple(loads), tuple(callee or ()))


def _lookup(frame: FrameType, name: str) -> Any:
    for scope in (frame.f_locals, frame.f_globals, vars(builtins)):
        if name in scope:
            return scope[name]
    return _UNKNOWN


_ROUTINES = (
    types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.MethodWrapperType,
    types.WrapperDescriptorType, types.MethodDescriptorType, types.ClassMethodDescriptorType,
)  # fmt: skip


def holds_jitted(obj: Any) -> bool:
    """A callable object holding a jitted function among its own attributes: a library's jit
    wrapper (``nnx.jit`` returns one). Functions, methods and classes are not such objects."""
    return held_jitted(obj) is not None


def held_jitted(obj: Any) -> Any | None:
    """The jitted function a jit wrapper object holds (see ``holds_jitted``), else None."""
    # Not ``inspect.isroutine``: a wrapper that binds as a method defines ``__get__``, which
    # makes it a "method descriptor" there (nnx.jit's JitWrapped does).
    if isinstance(obj, (type, functools.partial, *_ROUTINES)):
        return None
    kind = type(obj)
    if inspect.getattr_static(kind, "__call__", None) is None:
        return None
    # The instance's own attributes through the C-level __dict__ slot its class has (a class
    # that defines __dict__ itself is passed over: reading it could run its code).
    slot = next((k.__dict__["__dict__"] for k in kind.__mro__ if "__dict__" in k.__dict__), None)
    if not isinstance(slot, types.GetSetDescriptorType):
        return None
    own = slot.__get__(obj, kind)
    if not isinstance(own, dict):
        return None
    return next((v for v in own.values() if is_jitted(v)), None)


def calls_jax(frame: FrameType) -> bool:
    """Whether the frame is stopped in a call that may be a jitted function (or a wrapper
    holding one)."""
    site = call_site(frame.f_code, frame.f_lasti)
    if site is None:
        return False
    if not site.loads:
        return True  # the callable came from an expression we cannot name
    if any(v is _UNKNOWN or is_jitted(v) for v in _resolved(frame, site.loads)):
        return True
    return holds_jitted(_callee(frame, site))


def within_jax(frame: FrameType) -> bool:
    """Whether a caller's frame (one below the top) is stopped calling a jitted function or a
    wrapper holding one: the thread runs inside that call. A callee that cannot be named
    does not count here, or every stack with one would never be read."""
    site = call_site(frame.f_code, frame.f_lasti)
    callee = _UNKNOWN if site is None else _callee(frame, site)
    return callee is not _UNKNOWN and (is_jitted(callee) or holds_jitted(callee))


def _callee(frame: FrameType, site: CallSite) -> Any:
    """The object the call site calls, ``_UNKNOWN`` where it cannot be named or found."""
    resolved = list(_resolved(frame, site.callee))
    return resolved[-1] if resolved else _UNKNOWN


def _resolved(frame: FrameType, loads: Iterable[tuple[str, str]]) -> Iterator[Any]:
    """Each value a call site loads on the way to its callee (a name, then its attributes,
    read without running descriptors); ``_UNKNOWN`` from where one cannot be found."""
    current: Any = _UNKNOWN
    for kind, name in loads:
        if kind == "name":
            current = _lookup(frame, name)
        elif current is not _UNKNOWN:
            try:
                current = inspect.getattr_static(current, name)
            except AttributeError:
                current = _UNKNOWN
        yield current


def _frames(skip: Iterable[int]) -> dict[int, FrameType]:
    own = set(skip)
    return {i: f for i, f in internals.thread_frames().items() if i not in own}


def dispatch_marks(skip: Iterable[int] = ()) -> tuple[tuple[int, int, int], ...] | None:
    """Where every other thread stands, (thread, frame id, instruction), or None while one of
    them may be inside a jitted call. Two equal marks around a reading mean no thread ran
    Python in between, so none started a dispatch either."""
    marks = []
    for ident, frame in _frames(skip).items():
        if calls_jax(frame) or any(within_jax(f) for f in _outward(frame.f_back)):
            return None
        marks.append((ident, id(frame), frame.f_lasti))
    return tuple(sorted(marks))


def _outward(frame: FrameType | None) -> Iterator[FrameType]:
    """``frame`` and the frames below it, innermost first, at most ``MAX_CALLER_FRAMES``."""
    for _ in range(MAX_CALLER_FRAMES):
        if frame is None:
            return
        yield frame
        frame = frame.f_back


def xmon_threads() -> list[int]:
    """The agent's own threads: never the job's dispatchers."""
    return [t.ident for t in threading.enumerate() if t.name.startswith("xmon") and t.ident]


MAX_CALLER_FRAMES = 64  # frames walked out from the innermost, looking for a jitted call


def jitted_callee(frame: FrameType) -> Any | None:
    """The jitted function the frame is stopped calling (or the one a jit wrapper it calls
    holds), if its call site names it."""
    site = call_site(frame.f_code, frame.f_lasti)
    callee = _UNKNOWN if site is None else _callee(frame, site)
    if callee is _UNKNOWN:
        return None
    return callee if is_jitted(callee) else held_jitted(callee)


def jitted_call(thread: int | None) -> str:
    """The program (HLO module name, ``jit_<function>``) a thread is inside a call to now: the
    innermost of its frames stopped on a call whose call site names a jitted function, "" when
    none does. A stall inside a computation (a host callback that blocks, a collective that
    waits) is a stall inside that call on the dispatching thread."""
    frame = internals.thread_frames().get(thread) if thread is not None else None
    for caller in _outward(frame):
        callee = jitted_callee(caller)
        if callee is not None:
            name = inspect.getattr_static(callee, "__name__", None)
            return f"jit_{name}" if isinstance(name, str) else "a jitted function"
    return ""
