"""Which branches of a conditional ran, from the ops a sample saw (xmon.execution.branches)."""

from __future__ import annotations

import pytest

from xmon.execution.branches import (
    BranchMix,
    BranchTally,
    branch_mix,
    mixed_cost,
    tally,
    watched_ops,
)
from xmon.model import Branch, Conditional

MS = 10**9  # picoseconds

COND = Conditional(
    name="cond.1",
    branches=(Branch(1e6, 4e3, ("scale",)), Branch(9e6, 8e3, ("dot.1", "tanh"))),
    counted_flops=9e6,
    counted_bytes_accessed=8e3,
)


def runs(taken: list[int], period_ms: float = 10.0, device: int = 0) -> dict:
    """The watched ops' starts on ``device`` for executions of one conditional each, the
    ``i``-th taking branch ``taken[i]``: the conditional's event, then its branch's ops."""
    starts: dict[tuple[int, str], list[int]] = {}
    for i, branch in enumerate(taken):
        at = int(i * period_ms * MS) + MS
        starts.setdefault((device, "cond.1"), []).append(at)
        for k, op in enumerate(COND.branches[branch].ops):
            starts.setdefault((device, op), []).append(at + (k + 1) * MS // 10)
    return starts


def executions(n: int, period_ms: float = 10.0, device: int = 0) -> dict[int, list[int]]:
    return {device: [int(i * period_ms * MS) for i in range(n)]}


def test_the_ops_watched_are_the_conditional_s_and_its_branches() -> None:
    assert watched_ops([COND]) == {"cond.1", "scale", "dot.1", "tanh"}


def test_a_branch_taken_every_fourth_step_is_counted_over_its_own_periods() -> None:
    """Nine executions, the costly branch at the 2nd and 6th (one in four): a count over the
    window says 2 of 8, which happens to be right, and 3 of 9 for the next sample; between its
    own runs it is exactly 1 of 4 in either."""
    for taken in ([0, 1, 0, 0, 0, 1, 0, 0, 0], [1, 0, 0, 0, 1, 0, 0, 0, 1]):
        found = tally(COND, runs(taken), executions(len(taken)))
        assert found is not None
        mix = branch_mix(found)
        assert mix is not None
        assert mix.shares == pytest.approx((0.75, 0.25))
        assert mix.runs_per_execution == 1.0


def test_a_switch_in_a_loop_counts_each_execution_s_runs_over_whole_executions() -> None:
    """Three runs an execution (a scan of three layers), the costly branch in one of them; the
    sample stopped inside the fifth execution, after its first run: the window of whole
    executions holds four, 12 runs, 4 of them costly."""
    taken = [0, 1, 0] * 4 + [0]
    starts = runs(taken, period_ms=10.0)
    found = tally(COND, starts, executions(5, period_ms=30.0))
    assert found is not None
    assert (found.executions, found.conditional_runs) == (4, 12)
    assert found.branch_runs == (8, 4)
    mix = branch_mix(found)
    assert mix is not None
    assert mix.shares == pytest.approx((2 / 3, 1 / 3)) and mix.runs_per_execution == 3.0


def test_devices_add_up() -> None:
    both = {**runs([1, 0, 0, 0, 1], device=0), **runs([1, 0, 0, 0, 1], device=1)}
    found = tally(COND, both, {**executions(5, device=0), **executions(5, device=1)})
    assert found is not None and found.conditional_runs == 8 and found.sample_executions == 10
    mix = branch_mix(found)
    assert mix is not None and mix.shares == pytest.approx((0.75, 0.25))


def test_a_branch_without_ops_is_what_the_others_leave_of_the_conditional_s_runs() -> None:
    identity = Conditional("cond.1", (Branch(0.0, 0.0, ()), COND.branches[1]), 9e6, 8e3)
    starts = runs([1, 0, 0, 0, 1, 0, 0, 0])
    del starts[(0, "scale")]
    found = tally(identity, starts, executions(8))
    assert found is not None and found.branch_runs[0] == 5  # 7 in the window, 2 costly
    mix = branch_mix(found)
    assert mix is not None and mix.shares == pytest.approx((0.75, 0.25))
    # without the conditional's own event its runs are not seen: nothing is made up
    del starts[(0, "cond.1")]
    assert tally(identity, starts, executions(8)) is None
    # nor where two branches have no ops
    blind = Conditional("cond.1", (Branch(0.0, 0.0, ()), Branch(1.0, 1.0, ())), 1.0, 1.0)
    assert tally(blind, runs([0, 0]), executions(2)) is None


def test_without_the_conditional_s_own_events_its_runs_are_its_branches() -> None:
    """GPU: the conditional runs on the host, only its branches' kernels are seen."""
    starts = runs([1, 0, 0, 0, 1, 0, 0, 0, 1])
    del starts[(0, "cond.1")]
    found = tally(COND, starts, executions(9))
    assert found is not None
    mix = branch_mix(found)
    assert mix is not None and mix.shares == pytest.approx((0.75, 0.25))


def test_a_conditional_that_never_ran_gives_no_mix() -> None:
    assert branch_mix(BranchTally.none_seen(2, executions=40)) is None
    found = tally(COND, {}, executions(3))
    assert found is not None and found.conditional_runs == 0 and branch_mix(found) is None


def test_runs_per_execution_near_a_whole_number_are_that_number() -> None:
    """A window that cut an execution of a program that is not the step: 9 runs over 10."""
    tallied = BranchTally(10, 9, (6, 3), (6, 3), (0, 2), (0, 6), 10)
    mix = branch_mix(tallied)
    assert mix is not None and mix.runs_per_execution == 1.0
    nested = BranchTally(10, 5, (5, 0), (5, 0), (0, 0), (0, 0), 10)  # in one branch of another
    mix = branch_mix(nested)
    assert mix is not None and mix.runs_per_execution == 0.5


def test_the_mix_replaces_the_costliest_branch_the_figures_count() -> None:
    flops, moved = mixed_cost(COND, BranchMix((0.75, 0.25), 2.0))
    assert flops == pytest.approx(2.0 * (0.75 * 1e6 + 0.25 * 9e6 - 9e6))
    assert moved == pytest.approx(2.0 * (0.75 * 4e3 + 0.25 * 8e3 - 8e3))
    assert mixed_cost(COND, BranchMix((0.0, 1.0), 1.0)) == (0.0, 0.0)
