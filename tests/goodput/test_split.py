"""The daemon's split of stepping time (xmon.goodput.split): by the busy share of the job's
stepping, windows, and what a hostile agent can send."""

from __future__ import annotations

import math

import pytest

from xmon.goodput.split import GoodputSplit
from xmon.model import GOODPUT_BUCKETS


def test_stepping_is_split_by_the_busy_share_of_the_job_s_stepping() -> None:
    split = GoodputSplit()
    first = split.update({"startup": 5.0, "steps": 10.0}, 15.0, 1000.0, None)
    assert first.ratio is None and first.bucket("steps_unmeasured") == 10.0
    assert first.biggest_badput == "steps_unmeasured"
    # the first share splits all stepping so far
    got = split.update({"startup": 5.0, "steps": 20.0}, 25.0, 1010.0, 0.8)
    assert got.bucket("productive") == pytest.approx(16.0)
    assert got.bucket("host_wait") == pytest.approx(4.0)
    assert got.bucket("steps_unmeasured") == 0.0
    # the ledger's share over the life's stepping moves: all stepping is split by it
    got = split.update({"startup": 5.0, "steps": 40.0}, 45.0, 1030.0, 0.55)
    assert got.bucket("productive") == pytest.approx(22.0)
    assert got.ratio == pytest.approx(22.0 / 45.0)
    assert got.biggest_badput == "host_wait"
    assert sum(s for _, s in got.seconds) == pytest.approx(45.0)
    assert [name for name, _ in got.seconds] == list(GOODPUT_BUCKETS)
    # no reading this time (a job whose samples stopped stepping through): the last share holds
    got = split.update({"startup": 5.0, "steps": 50.0}, 55.0, 1040.0, None)
    assert got.bucket("productive") == pytest.approx(27.5)


def test_stepping_that_shrinks_keeps_its_share() -> None:
    """The agent's tail of steps turns idle once past the stall threshold: stepping seconds
    shrink, and productive and host-wait time shrink in proportion."""
    split = GoodputSplit()
    split.update({"steps": 10.0}, 10.0, 1000.0, 0.5)
    got = split.update({"steps": 8.0, "idle": 4.0}, 12.0, 1002.0, None)
    assert got.bucket("productive") == pytest.approx(4.0)
    assert got.bucket("idle") == 4.0


def test_windows_look_back_from_the_newest_point() -> None:
    split = GoodputSplit()
    for t in range(0, 3601, 5):  # an hour: fully productive, then 5 minutes of stall
        productive = min(t, 3300)
        got = split.update({"steps": float(productive), "stall": float(t - productive)},
                           float(t), 1000.0 + t, 1.0)  # fmt: skip
    assert got.ratio == pytest.approx(3300 / 3600)
    assert got.ratio_5m == pytest.approx(0.0, abs=0.02)
    assert got.ratio_1h == pytest.approx(3300 / 3600, abs=0.01)
    young = GoodputSplit().update({"steps": 30.0, "startup": 30.0}, 60.0, 5.0, 1.0)
    assert young.ratio_5m == pytest.approx(0.5)  # younger than the window: its whole life


def test_hostile_numbers_count_nothing() -> None:
    split = GoodputSplit()
    got = split.update({"steps": math.inf, "stall": -5.0, "compile": math.nan, "nonsense": 9.0,
                        "startup": 3.0}, 3.0, 1000.0, 7.0)  # fmt: skip
    assert dict(got.seconds)["startup"] == 3.0
    assert sum(s for _, s in got.seconds) == 3.0
    assert got.ratio == 0.0  # a share (clamped to 1) of no stepping


def test_the_intake_drops_non_finite_seconds_from_the_account() -> None:
    from xmon.daemon.intake.sanitize import scrub
    from xmon.wire.proto import xmon_pb2

    account = xmon_pb2.GoodputAccount(process_started_at=1.0, as_of=math.inf)
    account.seconds.update({"steps": 5.0, "stall": math.nan, "idle": -math.inf})
    report = xmon_pb2.AgentReport(goodput=account)
    assert scrub(report) == 3
    assert dict(report.goodput.seconds) == {"steps": 5.0}
    assert report.goodput.as_of == 0.0  # cleared: the account's age is unknown


def test_a_job_keeps_only_the_account_s_own_buckets() -> None:
    """A hostile agent's account padded with names the daemon never reads costs it nothing."""
    from xmon.daemon.bounds import StateBudget
    from xmon.daemon.intake.convert import hello_of, report_of
    from xmon.daemon.jobs import JobState
    from xmon.wire.proto import xmon_pb2

    def held(padding: int) -> tuple[dict[str, float], int]:
        budget = StateBudget()
        hello = hello_of(xmon_pb2.AgentHello(pid=7, job_name="j"), budget)
        state = JobState(hello=hello, connected_at=0.0, budget=budget)
        account = xmon_pb2.GoodputAccount(process_started_at=1.0, as_of=11.0)
        account.seconds.update({"steps": 4.0, "startup": 6.0})
        account.seconds.update({f"pad{i:05d}" + "x" * 100: 1.0 for i in range(padding)})
        state.apply(report_of(xmon_pb2.AgentReport(goodput=account), budget), 11.0, 11.0)
        assert state.report is not None and state.report.goodput is not None
        return dict(state.report.goodput.seconds), state.held_bytes

    assert held(2000) == held(0) == ({"steps": 4.0, "startup": 6.0}, held(0)[1])
