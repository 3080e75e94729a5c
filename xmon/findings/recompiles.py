"""Recompilation: which function recompiles in steady state, and what changed between compiles.

The agent describes each compile's arguments as text and keeps a table of compiled functions
(:mod:`xmon.analysis.compiles`, whose rules the agent and the daemon share, so "steady state"
means the same in the job's counters and in the finding); the daemon's detector here reads the
table from the report and names the change and its fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from xmon.model import Finding

STORM_WARNING = 3  # steady recompiles of one function that make a warning
STORM_ERROR = 20

# The kinds of change, in the order a diff reports them (the first found names the cause).
FIXES = {
    "shape": "Pad or bucket the argument to a few fixed shapes (e.g. round the length up to a "
    "multiple of 128), or mark the dimension static and accept one compile per bucket.",
    "dtype": "Cast the argument to one dtype before the call (e.g. x.astype(jnp.float32)).",
    "weak_type": "Pass arrays, not Python scalars, or wrap the scalar once with "
    "jnp.asarray(value, dtype) so its type does not flip between weak and strong.",
    "sharding": "Give the argument the same sharding every call (jax.device_put with one "
    "NamedSharding), or set in_shardings on the jit.",
    "arguments": "Call the function with the same number and structure of arguments "
    "(the same pytree) every time.",
    "argument": "An argument past the first 4,096 changes its shape, dtype or sharding "
    "between calls: give each argument one shape, dtype and sharding every call (pad or "
    "bucket changing shapes).",
    "static": "A static argument or a closed-over value changes the program: pass it as a "
    "traced argument, or keep its values to a few.",
    "function": "The jitted function is a new object each call (a closure, lambda or "
    "functools.partial rebuilt in the loop): create the jit once, outside the loop, and pass "
    "the changing values as arguments.",
}


@dataclass(frozen=True)
class FunctionCompiles:
    """A recompiled function as the daemon reads it from a report."""

    name: str
    compiles_total: int
    steady_recompiles_total: int
    eager: bool = False
    first_compiled_at: float = 0.0
    last_compiled_at: float = 0.0
    changes: tuple[str, ...] = ()
    arguments: tuple[str, ...] = ()
    jax_explanation: str = ""


def change_kind(change: str) -> str:
    kind = change.partition(":")[0]
    return kind if kind in FIXES else "static"


def detect_recompiles(functions: tuple[FunctionCompiles, ...], since: float) -> list[Finding]:
    """One finding per jitted function recompiled at least ``STORM_WARNING`` times in steady
    state, naming what changed between its compiles."""
    findings = []
    for fn in functions:
        count = fn.steady_recompiles_total
        if fn.eager or count < STORM_WARNING:
            continue
        latest = fn.changes[-1] if fn.changes else "static: unknown"
        kind = change_kind(latest)
        evidence = (
            ("steady-state recompiles", str(count)),
            ("compiles", str(fn.compiles_total)),
            *((f"change {i + 1}", c) for i, c in enumerate(fn.changes)),
            ("latest arguments", ", ".join(fn.arguments) or "unknown"),
            *((("jax explains", fn.jax_explanation),) if fn.jax_explanation else ()),
        )
        findings.append(
            Finding(
                kind="recompile",
                severity="error" if count >= STORM_ERROR else "warning",
                summary=f"{fn.name} recompiled {count} times in steady state: "
                f"{kind.replace('_', ' ')} changes between calls",
                since=since,
                evidence=evidence,
                fix=FIXES[kind],
                subject=fn.name,
                value=float(count),
            )
        )
    return findings
