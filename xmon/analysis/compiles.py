"""Compiles judged the same way in the job and in the daemon: which compile is a steady-state
recompile, how a compile's arguments are written down, what changed between two compiles, and
the agent's bounded table of compiled functions. Pure: nothing here imports jax (the agent
describes arguments from the avals jax lowered the program with); the recompile finding
(:mod:`xmon.findings.recompiles`) reads the table the agent reports.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WARMUP_STEPS = 3  # marked steps after which a recompile is a steady-state one
UNMARKED_WARMUP_SECONDS = 30.0  # without markers: a recompile this long after the first compile
MAX_FUNCTIONS = 1024  # functions the agent keeps a table row for
MAX_REPORTED = 16  # functions sent in each report (the recompiled ones, worst first)
MAX_CHANGES = 4
MAX_ARGUMENTS = 32  # arguments reported (the latest compile's first ones)
# Arguments compared between two compiles of a function: all of a model's leaves (a 2-layer
# model with Adam has ~90, the batch last; comparing only the first 32 called a changed batch
# shape "static"). Past it the rest are compared by a digest (ARGUMENTS_PAST).
MAX_COMPARED = 4096
MAX_COMPARED_TOTAL = 1 << 18  # over all functions the agent keeps rows for (~2 MiB of refs)
ARGUMENTS_PAST = "…"  # the text standing for the arguments past MAX_COMPARED, with their digest
MAX_TEXT = 200


def is_steady(eager: bool, recompile: bool, steps_before: int, marked: bool, age: float) -> bool:
    """Whether a compile counts as a steady-state recompile: a jitted function (not an eager
    primitive) compiled again after warm-up (``WARMUP_STEPS`` marked steps; without markers,
    ``UNMARKED_WARMUP_SECONDS`` after the function's first compile, ``age``)."""
    if eager or not recompile:
        return False
    return steps_before >= WARMUP_STEPS if marked else age >= UNMARKED_WARMUP_SECONDS


def argument_text(type_text: str, weak: bool, sharding: str | None) -> str:
    """One argument as the table keeps it: ``float32[8,16]``, `` weak``, `` @sharding``."""
    text = type_text + (" weak" if weak else "")
    return (text + " @" + sharding if sharding else text)[:MAX_TEXT]


def _split(argument: str) -> tuple[str, str, bool, str]:
    """(dtype, shape, weak, sharding) of an :func:`argument_text`."""
    head, _, sharding = argument.partition(" @")
    weak = head.endswith(" weak")
    type_text = head[: -len(" weak")] if weak else head
    dtype, _, shape = type_text.partition("[")
    return dtype, shape, weak, sharding


def describe_change(before: tuple[str, ...], after: tuple[str, ...], same_program: bool) -> str:
    """What changed between two compiles of a function, as ``"<kind>: <detail>"``."""
    if len(before) != len(after):
        return f"arguments: {len(before)} arguments before, {len(after)} now"
    found: dict[str, list[str]] = {}
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        if old == new:
            continue
        if old.startswith(ARGUMENTS_PAST) or new.startswith(ARGUMENTS_PAST):
            found.setdefault("argument", []).append(f"arguments past {index} ({new})")
            continue
        kind = _first_difference(_split(old), _split(new))
        found.setdefault(kind, []).append(f"arg {index} {old} -> {new}")
    for kind in ("shape", "dtype", "weak_type", "sharding", "argument"):
        if kind in found:
            return f"{kind}: " + "; ".join(found[kind][:3])
    if not same_program:
        return (
            "static: same arguments, a different program (a static argument or a "
            "closed-over value changed)"
        )
    return "function: same arguments and the same program (the function object is new)"


_PARTS = ("dtype", "shape", "weak_type", "sharding")


def _first_difference(old: tuple[str, str, bool, str], new: tuple[str, str, bool, str]) -> str:
    for kind, before, after in zip(_PARTS, old, new, strict=True):
        if before != after:
            return kind
    return "shape"  # the texts differ in a way the parts do not show


@dataclass
class FunctionRow:
    """One function's compiles, as the agent keeps them."""

    name: str
    eager: bool
    first_compiled_at: float
    last_compiled_at: float = 0.0
    compiles_total: int = 0
    steady_recompiles_total: int = 0
    arguments: tuple[str, ...] = ()  # the latest compile's first MAX_ARGUMENTS (reported)
    compared: tuple[str, ...] = ()  # all of them (up to MAX_COMPARED), for the next diff
    fingerprint: str = ""
    changes: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_CHANGES))
    jax_explanation: str = ""  # jax's own, for the latest compile (jax_explain_cache_misses)


class FunctionTable:
    """Per-function compile history in the agent (the caller holds its lock)."""

    def __init__(self) -> None:
        self.rows: dict[str, FunctionRow] = {}
        self.steady_recompiles_total = 0
        self.eager_compiles_total = 0
        self._compared_total = 0  # arguments kept for diffs over all rows

    def record(
        self,
        name: str,
        arguments: tuple[str, ...],
        fingerprint: str,
        eager: bool,
        now: float,
        steps_before: int,
        marked: bool,
    ) -> None:
        row = self.rows.get(name)
        if row is None:
            if len(self.rows) >= MAX_FUNCTIONS:
                return
            row = self.rows[name] = FunctionRow(name, eager, now)
        recompile = row.compiles_total > 0
        if recompile:
            row.changes.append(
                describe_change(row.compared, arguments, fingerprint == row.fingerprint)
            )
        age = now - row.first_compiled_at
        if is_steady(eager, recompile, steps_before, marked, age):
            row.steady_recompiles_total += 1
            self.steady_recompiles_total += 1
        self.eager_compiles_total += int(eager)
        row.compiles_total += 1
        row.last_compiled_at = now
        row.arguments, row.fingerprint = arguments[:MAX_ARGUMENTS], fingerprint
        self._compared_total -= len(row.compared)
        room = max(MAX_COMPARED_TOTAL - self._compared_total, MAX_ARGUMENTS)
        row.compared = arguments[:room]  # a table past its bound compares the first ones only
        self._compared_total += len(row.compared)

    def explain(self, name: str, explanation: str) -> None:
        """jax's explanation of the compile of ``name`` just recorded ("" when it gave none)."""
        row = self.rows.get(name)
        if row is not None:
            row.jax_explanation = explanation

    def recompiled(self) -> list[FunctionRow]:
        """The rows compiled more than once, most steady recompiles first (at most 16)."""
        rows = [r for r in self.rows.values() if r.compiles_total > 1]
        rows.sort(key=lambda r: (-r.steady_recompiles_total, -r.compiles_total, r.name))
        return rows[:MAX_REPORTED]
