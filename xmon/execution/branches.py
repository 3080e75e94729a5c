"""Which branches of a program's conditionals ran, from the execution ledger's samples: pure
functions, no I/O.

XLA costs a conditional (``lax.cond``, ``lax.switch``) at its costliest branch, whichever one
runs, so a program holding one whose branches do different work has figures that are an upper
bound (xmon.execution.loop_cost describes each such conditional: its branches' costs and the
instructions at each branch's top level). A sample shows the ops that ran: each run of a branch
runs each of its top-level instructions once, and on CPU the conditional itself is an op
event. Counting them gives how often each branch ran, per run of the conditional, and how
often the conditional ran per execution of its program (more than once inside a loop).

Counts are taken over whole executions of the program on each device (from its first start
in the sample to its last), so a conditional that takes the same branches every execution (one
per layer of a scan) is counted exactly. A branch taken less than once an execution (an eval or
a logging step every k steps) is counted over its own whole periods instead, between its first
and last run in the sample, against the conditional's runs in the same span: that ratio is
exact, where a window of executions is off by up to a run at either end (one in four taken 2
or 3 times in a window of nine runs is 22-33 %). The most frequent branch takes what the
others leave.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from xmon.model import Conditional

WHOLE_RUNS_TOLERANCE = 0.15  # runs per execution this close to a whole number are that number


@dataclass(frozen=True)
class BranchTally:
    """What one sample showed of one conditional of one program, summed over its devices.

    Counts are over whole periods of the program on each device (from its first execution's
    start to its last's), where a device ran it twice or more: what a window of whole
    executions holds of a conditional that runs the same branches every execution (one per
    layer of a scan) is exact, where a window that cuts an execution is not."""

    executions: int  # the program's executions in the windows
    conditional_runs: int  # the conditional's runs in the same windows
    branch_runs: tuple[int, ...]  # each branch's runs in them
    # per branch: its runs in the whole sample, its runs over its own whole periods (one fewer
    # than its runs in them, 0 below two runs), and the conditional's runs in the same spans
    sample_branch_runs: tuple[int, ...]
    period_runs: tuple[int, ...]
    period_conditional_runs: tuple[int, ...]
    sample_executions: int  # the program's executions in the whole sample

    def __add__(self, other: BranchTally) -> BranchTally:
        def plus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(x + y for x, y in zip(a, b, strict=True))

        return BranchTally(
            self.executions + other.executions,
            self.conditional_runs + other.conditional_runs,
            plus(self.branch_runs, other.branch_runs),
            plus(self.sample_branch_runs, other.sample_branch_runs),
            plus(self.period_runs, other.period_runs),
            plus(self.period_conditional_runs, other.period_conditional_runs),
            self.sample_executions + other.sample_executions,
        )

    @classmethod
    def none_seen(cls, branches: int, executions: int) -> BranchTally:
        """A sample in which the program ran ``executions`` times and its conditional not once
        (a loop of no trips), or not that the sample shows (its ops are not traced)."""
        zeros = (0,) * branches
        return cls(executions, 0, zeros, zeros, zeros, zeros, executions)


@dataclass(frozen=True)
class BranchMix:
    """How a conditional's branches ran over the ledger's window."""

    shares: tuple[float, ...]  # of the conditional's runs, each branch's (summing to 1)
    runs_per_execution: float  # the conditional's runs per execution of its program, per device


def watched_ops(conditionals: Iterable[Conditional]) -> frozenset[str]:
    """The op names whose events a sample keeps for ``conditionals``."""
    return frozenset(
        name for c in conditionals for name in (c.name, *(op for b in c.branches for op in b.ops))
    )


def tally(
    conditional: Conditional,
    starts: Mapping[tuple[int, str], Sequence[int]],
    executions: Mapping[int, Sequence[int]],
) -> BranchTally | None:
    """One sample's tally of ``conditional``; ``starts``: the sorted start times of each watched
    op on each device, ``(device, op name) -> starts``; ``executions``: the sorted starts of
    the program's executions on each device. None where its runs cannot be told: no event of
    the conditional itself, and a branch without ops of its own (its runs would be the
    conditional's less the others', of which neither is seen)."""
    total: BranchTally | None = None
    for device in sorted(executions):
        found = _device_tally(conditional, starts, device, executions[device])
        if found is not None:
            total = found if total is None else total + found
    return total


def _device_tally(
    conditional: Conditional,
    starts: Mapping[tuple[int, str], Sequence[int]],
    device: int,
    executions: Sequence[int],
) -> BranchTally | None:
    if not executions:
        return None
    # A branch's runs: the starts of its op seen most (each of its ops runs once a run of it;
    # one an XLA backend fused away or never traced is seen less, or not at all)
    marks: list[Sequence[int] | None] = []
    for branch in conditional.branches:
        seen = [starts.get((device, op), ()) for op in branch.ops]
        marks.append(max(seen, key=len) if seen else None)
    if sum(m is None for m in marks) > 1:
        return None  # two branches without ops: how the rest divides between them is unknown
    own = starts.get((device, conditional.name), ())
    if own:
        runs: Sequence[int] = own
    elif all(m is not None for m in marks):
        runs = sorted(t for m in marks if m is not None for t in m)
    else:
        return None
    # the window: the program's whole periods on this device, else the whole sample
    low, high = (executions[0], executions[-1]) if len(executions) >= 2 else (-1, 2**63)
    whole = whole_executions(executions)
    in_window = _count(runs, low, high)
    counts = [_count(m, low, high) if m is not None else -1 for m in marks]
    sample_counts = [len(m) if m is not None else -1 for m in marks]
    for i, mark in enumerate(marks):
        if mark is None:  # the one branch without ops: what the others leave of the runs
            counts[i] = max(0, in_window - sum(n for n in counts if n >= 0))
            sample_counts[i] = max(0, len(runs) - sum(n for n in sample_counts if n >= 0))
    periods, spans = [], []
    for mark in marks:
        if mark is None or len(mark) < 2:
            periods.append(0)
            spans.append(0)
            continue
        periods.append(len(mark) - 1)
        spans.append(_count(runs, mark[0], mark[-1]))
    return BranchTally(
        whole, in_window, tuple(counts), tuple(sample_counts), tuple(periods), tuple(spans),
        len(executions),
    )  # fmt: skip


def whole_executions(starts: Sequence[int]) -> int:
    """The executions a window from the first of ``starts`` to the last holds: one fewer than
    the starts, or the one there is."""
    return len(starts) - 1 if len(starts) >= 2 else len(starts)


def _count(times: Sequence[int], low: int, high: int) -> int:
    """How many of the sorted ``times`` are in [low, high)."""
    return bisect.bisect_left(times, high) - bisect.bisect_left(times, low)


def branch_mix(total: BranchTally) -> BranchMix | None:
    """The branches' shares over a window's pooled tally, and the conditional's runs per
    execution of its program on a device. None where the conditional never ran in them.

    A branch that ran less than once an execution (taken every k-th step) is counted over its
    own whole periods; one that ran as often or more, over the program's. The most frequent
    takes what the others leave.

    Runs per execution near a whole number are that number: a conditional runs a whole number
    of times an execution (once, or once a trip of the loop it is in); the windows hold whole
    executions, but an execution of a program that is not the step can still be cut by one."""
    if total.conditional_runs <= 0 or total.executions <= 0:
        return None
    per_execution = total.conditional_runs / total.executions
    whole = round(per_execution)
    if whole >= 1 and abs(per_execution - whole) <= WHOLE_RUNS_TOLERANCE * whole:
        per_execution = float(whole)
    counts = total.sample_branch_runs
    most = max(range(len(counts)), key=counts.__getitem__)
    shares = [0.0] * len(counts)
    for i, runs in enumerate(counts):
        rare = runs < total.sample_executions
        if i == most:
            continue
        if rare and total.period_conditional_runs[i] > 0:
            shares[i] = total.period_runs[i] / total.period_conditional_runs[i]
        else:
            shares[i] = total.branch_runs[i] / total.conditional_runs
    others = sum(shares)
    if others > 1.0:  # counts that disagree (a branch whose ops ran elsewhere too): scaled
        shares = [s / others for s in shares]
        others = 1.0
    shares[most] = 1.0 - others
    return BranchMix(tuple(shares), per_execution)


def mixed_cost(conditional: Conditional, mix: BranchMix) -> tuple[float, float]:
    """What the branches the samples saw add to one execution's (FLOPs, bytes accessed), per
    device, in place of the costliest branch every run the program's figures count: at most
    0 where the costliest ran every time."""
    branches = conditional.branches
    flops = sum(share * b.flops for share, b in zip(mix.shares, branches, strict=True))
    moved = sum(share * b.bytes_accessed for share, b in zip(mix.shares, branches, strict=True))
    runs = mix.runs_per_execution
    return (
        runs * (flops - conditional.counted_flops),
        runs * (moved - conditional.counted_bytes_accessed),
    )
