"""The execution ledger on samples built with the XSpace stubs (xmon.execution.samples and
xmon.execution.ledger) and the rates derived from it (xmon.execution.rates)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from xmon.daemon.ledger_reader import LedgerReader
from xmon.execution import rates
from xmon.execution.ledger import (
    RARER_PERIODS_WANTED,
    RARER_SAMPLE_BYTES,
    RARER_SAMPLE_MAX_SECONDS,
    JobLedger,
    ledger_rates,
    nearest_whole,
    per_step_ratio,
    rarer_sample_seconds,
    unmarked_sample_seconds,
)
from xmon.execution.samples import (
    ExecutionSample,
    SampleReading,
    SampleUnreadable,
    parse_sample,
    rarer_periods,
)
from xmon.model import Branch, Conditional, Program
from xmon.wire.proto import xplane_pb2 as xp
from xmon.wire.protocol import SAMPLE_ANCHOR, SAMPLE_MIN_SECONDS, SAMPLE_RECORD_MAX_SECONDS

PROGRAM, RUN, ORDINAL, OP, MODULE = 1, 2, 3, 4, 5  # stat metadata ids
MS = 10**9  # picoseconds


def host_plane() -> xp.XPlane:
    """The CPU backend's plane: ops on host threads, each with its device ordinal."""
    plane = xp.XPlane(name="/host:CPU")
    for key, name in ((PROGRAM, "program_id"), (RUN, "run_id"), (ORDINAL, "device_ordinal"),
                      (OP, "hlo_op")):  # fmt: skip
        plane.stat_metadata[key].CopyFrom(xp.XStatMetadata(id=key, name=name))
    return plane


def cpu_op(line: xp.XLine, program: int, run: int, device: int, start_ms: float,
           length_ms: float) -> None:  # fmt: skip
    line.events.append(xp.XEvent(
        offset_ps=int(start_ms * MS), duration_ps=int(length_ms * MS),
        stats=[xp.XStat(metadata_id=PROGRAM, int64_value=program),
               xp.XStat(metadata_id=RUN, int64_value=run),
               xp.XStat(metadata_id=ORDINAL, int64_value=device),
               xp.XStat(metadata_id=OP, str_value="fusion")]))  # fmt: skip


def periodic_space(
    period_ms: float, steps: int, devices: int = 2, offset_ms: float = 3.0
) -> xp.XSpace:
    """Program 7 (the step: two 2 ms ops per device) every period; program 9 (1 ms on device
    0) once every other period; a host wait event with a device ordinal but no op."""
    plane = host_plane()
    line = plane.lines.add(name="tf_XLAPjRtCpuClient/1")
    run = 1000
    for i in range(steps):
        start = offset_ms + i * period_ms
        run += 1
        for device in range(devices):
            cpu_op(line, 7, run, device, start, 2.0)
            cpu_op(line, 7, run, device, start + 1.0, 2.0)  # overlaps the first: counted once
        if i % 2 == 0:
            run += 1
            cpu_op(line, 9, run, 0, start + 4.0, 1.0)
    line.events.append(xp.XEvent(offset_ps=0, duration_ps=50 * MS, stats=[
        xp.XStat(metadata_id=ORDINAL, int64_value=0),
        xp.XStat(metadata_id=RUN, int64_value=1)]))  # fmt: skip
    return xp.XSpace(planes=[plane])


def parse(space: xp.XSpace, duration: float, **kwargs: object) -> SampleReading:
    return parse_sample(space.SerializeToString(), 1000.0, duration, **kwargs)  # type: ignore[arg-type]


def test_executions_are_counted_in_whole_periods_of_the_dominant_program() -> None:
    # 10 steps of 20 ms starting 3 ms in: the core window runs from the first to the last
    # start of program 7 (9 periods, 180 ms), so its rate is exactly 50/s.
    reading = parse(periodic_space(20.0, 10), duration=0.2)
    assert reading.core_seconds == pytest.approx(0.180)
    assert reading.executions == {7: 9, 9: 5}
    assert reading.steps_in_core == pytest.approx(9.0)  # no markers: program 7 is the step
    assert reading.program_device_runs == {7: 20, 9: 5}
    # union per device: 3 ms of the two overlapping ops, per device per step
    assert reading.program_device_seconds[7] == pytest.approx(10 * 2 * 0.003)
    assert reading.device_busy_seconds[0] == pytest.approx(10 * 0.003 + 5 * 0.001)
    assert reading.device_busy_seconds[1] == pytest.approx(10 * 0.003)
    # in the core window: the 9 periods' steps, and program 9 in 5 of them; not the 10th step
    assert reading.core_busy_seconds == {0: pytest.approx(9 * 0.003 + 5 * 0.001),
                                         1: pytest.approx(9 * 0.003)}  # fmt: skip


def test_marked_steps_give_the_steps_in_the_core_window() -> None:
    # Step markers every 40 ms (the program runs twice a step: gradient accumulation).
    begins = [0.001 + 0.040 * i for i in range(5)]
    reading = parse(periodic_space(20.0, 10), 0.2, step_begins=begins, steps_marked=True)
    assert reading.steps_in_core == pytest.approx(0.180 / 0.040)
    rates_now = ledger_rates([reading])
    assert rates_now.executions_per_step[7] == pytest.approx(2.0)
    assert rates_now.steps_per_second == pytest.approx(25.0)


def anchored(space: xp.XSpace, at_ms: float, line_ns: int = 0) -> xp.XSpace:
    """``space`` with the agent's anchor annotation at ``at_ms`` on a python line of its host
    plane whose timestamp is ``line_ns`` (the XSpace's clock, not the agent's)."""
    plane = space.planes[0]
    plane.event_metadata[77].CopyFrom(xp.XEventMetadata(id=77, name=SAMPLE_ANCHOR))
    line = plane.lines.add(name="python", timestamp_ns=line_ns)
    line.events.append(xp.XEvent(metadata_id=77, offset_ps=int(at_ms * MS), duration_ps=MS))
    return space


@pytest.mark.parametrize("line_ns", [0, 10**9])
def test_long_steps_are_counted_whole_between_anchored_begins(line_ns: int) -> None:
    # 300 ms steps, each running program 7 once, 1 ms after its begin: a 0.5 s sample holds
    # two starts, no core window, and one whole step between its two begins. The agent's clock
    # reads 0.5 ms where the XSpace's reads 2 ms (plus the lines' own timestamp, whatever it is).
    space = xp.XSpace(planes=[host_plane()])
    line = space.planes[0].lines.add(name="tf_XLAPjRtCpuClient/1", timestamp_ns=line_ns)
    for i, start in enumerate((4.5, 304.5)):
        cpu_op(line, 7, 100 + i, 0, start, 250.0)
    anchored(space, at_ms=2.0, line_ns=line_ns)
    begins = [0.002, 0.302]  # 3.5 ms and 303.5 ms on the XSpace's clock
    reading = parse(space, 0.5, step_begins=begins, steps_marked=True, anchor_seconds=0.0005)
    assert reading.whole_periods and reading.steps_in_core == 1
    assert reading.executions == {7: 1} and reading.core_seconds == pytest.approx(0.300)
    assert reading.core_busy_seconds == {0: pytest.approx(0.250)}  # the first step's op only
    assert ledger_rates([reading]).executions_per_step == {7: 1.0}
    # A 200 ms window of rates saw 1.5 executions per step of such a job; without the anchor
    # the sample is no whole periods, and its guess is not used beside whole ones.
    guess = parse(space, 0.5, step_begins=begins, steps_marked=True)
    assert not guess.whole_periods


def test_whole_periods_keep_their_rates_beside_anchored_begins() -> None:
    # Program 7 every 20 ms, step markers every 40 ms: the core window's two rates, as
    # before, whether or not the sample is anchored.
    begins = [0.001 + 0.040 * i for i in range(5)]
    space = anchored(periodic_space(20.0, 10), at_ms=1.0)
    for anchor in (None, 0.0):
        reading = parse(space, 0.2, step_begins=begins, steps_marked=True, anchor_seconds=anchor)
        assert reading.steps_in_core == pytest.approx(0.180 / 0.040)
        assert ledger_rates([reading]).executions_per_step[7] == pytest.approx(2.0)


def dispatched(space: xp.XSpace, at_ms: list[float]) -> xp.XSpace:
    """``space`` with the host's dispatches (PjRt's Execute TraceMe on the python thread)."""
    plane = space.planes[0]
    plane.event_metadata[78].CopyFrom(
        xp.XEventMetadata(id=78, name="CommonPjRtLoadedExecutable::Execute (jit_step)")
    )
    line = next(line for line in plane.lines if line.name == "python")
    for at in at_ms:
        line.events.append(xp.XEvent(metadata_id=78, offset_ps=int(at * MS), duration_ps=MS))
    return space


def test_steps_come_from_the_host_s_dispatches_where_the_device_falls_behind() -> None:
    """An asynchronous job whose host runs ahead of the device while the profiler records:
    begins every 20 ms, each dispatching program 7 (and program 9 every other step), while the
    device runs program 7 every 40 ms. The begins' rate beside the device's gave 0.5 of a step
    per execution; the host's dispatches between the begins give the steps."""
    begins = [0.001 + 0.020 * i for i in range(10)]
    space = anchored(periodic_space(40.0, 5), at_ms=0.0)
    space = dispatched(space, [1.5 + 20 * i for i in range(10)] + [2.0 + 40 * i for i in range(5)])
    reading = parse(space, 0.2, step_begins=begins, steps_marked=True, anchor_seconds=0.0)
    # 9 whole steps between the first and last begin dispatched 9 + 5 = 14 executions (1.5 a
    # step, program 9 every other step); the core window's 4 + 2 executions are 4 steps.
    assert reading.steps_in_core == pytest.approx(6 * 9 / 14)
    per_step = ledger_rates([reading]).executions_per_step
    assert per_step[7] == pytest.approx(1.0, rel=0.05)
    assert per_step[9] == pytest.approx(0.5, rel=0.1)
    without = parse(periodic_space(40.0, 5), 0.2, step_begins=begins, steps_marked=True)
    assert ledger_rates([without]).executions_per_step[7] == pytest.approx(0.5)  # the old bias


def test_without_markers_two_starts_are_no_period_and_infer_nothing() -> None:
    """A job without markers whose warm-up run came 39 ms before the first of its 10 s steps:
    the two starts are no period of its step, and inferred nothing but garbage (25.6 steps in
    one sample, 1/13 of an execution a step). Steps are inferred from whole periods only."""
    space = xp.XSpace(planes=[host_plane()])
    line = space.planes[0].lines.add(name="tf_XLAPjRtCpuClient/1")
    cpu_op(line, 7, 100, 0, 10.0, 5.0)
    cpu_op(line, 7, 101, 0, 49.0, 5.0)  # the first step, 39 ms after the warm-up
    reading = parse(space, 1.0)
    assert not reading.whole_periods
    rates = ledger_rates([reading])
    assert rates.executions_per_step == {} and rates.steps_per_second is None
    whole = parse(periodic_space(20.0, 10), duration=0.2)
    assert ledger_rates([reading, whole]).executions_per_step[7] == pytest.approx(1.0)


def test_marked_job_with_no_step_in_the_sample_counts_no_steps() -> None:
    reading = parse(periodic_space(20.0, 10), 0.2, step_begins=[], steps_marked=True)
    assert reading.steps_in_core == 0.0
    assert ledger_rates([reading]).executions_per_step == {}


def test_few_executions_count_over_the_whole_sample() -> None:
    reading = parse(periodic_space(150.0, 2), duration=0.3)
    assert reading.core_seconds == 0.3
    assert reading.executions == {7: 2, 9: 1}
    assert reading.core_busy_seconds is None  # no window: its busy seconds are the sample's


def gpu_space(device: int, starts_ms: list[float]) -> xp.XPlane:
    plane = xp.XPlane(name=f"/device:GPU:{device}")
    for key, name in ((PROGRAM, "program_id"), (RUN, "run_id")):
        plane.stat_metadata[key].CopyFrom(xp.XStatMetadata(id=key, name=name))
    plane.event_metadata[5].CopyFrom(xp.XEventMetadata(id=5, name="gemm", stats=[
        xp.XStat(metadata_id=PROGRAM, int64_value=3)]))  # fmt: skip
    modules = plane.lines.add(name="XLA Modules", timestamp_ns=1_000)
    stream = plane.lines.add(name="Stream #14(Compute)", timestamp_ns=1_000)
    for start in starts_ms:
        modules.events.append(xp.XEvent(metadata_id=5, offset_ps=int(start * MS),
                                        duration_ps=5 * MS))  # fmt: skip
        stream.events.append(xp.XEvent(metadata_id=5, offset_ps=int(start * MS),
                                       duration_ps=4 * MS))  # fmt: skip
    return plane


def test_device_planes_give_the_device_and_module_events_the_executions() -> None:
    space = xp.XSpace(planes=[gpu_space(0, [0, 10, 20, 30]), gpu_space(1, [0, 10, 20, 30])])
    reading = parse(space, duration=0.05)
    assert reading.executions == {3: 3}
    assert reading.core_seconds == pytest.approx(0.030)
    assert reading.device_busy_seconds == {0: pytest.approx(0.016), 1: pytest.approx(0.016)}
    assert ledger_rates([reading]).busy_ratio == {0: pytest.approx(0.32), 1: pytest.approx(0.32)}


@pytest.mark.parametrize("data", [b"\x1f\x8b garbage", b"\xff" * 64])
def test_bytes_that_are_not_a_sample_raise_one_error(data: bytes) -> None:
    with pytest.raises(SampleUnreadable):
        parse_sample(data, 1.0, 0.2)


def test_rates_sum_counts_over_windows_and_bound_the_window() -> None:
    ledger = JobLedger(window_samples=2)
    for steps in (10, 10, 5):
        ledger.add(parse(periodic_space(20.0, steps), duration=0.2))
    now = ledger.rates()
    assert now.samples == 2
    assert now.executions_per_second[7] == pytest.approx(50.0)
    assert now.executions_per_step[7] == pytest.approx(1.0)
    # program 9 runs every other step: the dominant program's windows (9 and 4 periods) hold
    # 5 and 2 of its runs, 7/13 a step; its own whole periods hold the truth
    assert now.executions_per_step[9] == pytest.approx(0.5)
    assert now.executions_per_second[9] == pytest.approx(25.0)


def test_a_rarer_program_counts_over_its_own_whole_periods() -> None:
    # The step's program 7 starts every 10 ms; an eval (program 9) every 4th step from the 2nd
    # on: between its first and last start, 3 evals and 12 steps, where the window from the
    # first to the last step (13 periods) holds 4 evals
    starts = {7: [i * 10 for i in range(14)], 9: [i * 10 + 5 for i in range(1, 14, 4)]}
    assert rarer_periods(starts, 7) == {9: (3, 12)}
    # as frequent as the dominant one or more (micro-steps), or started once: not here
    micro = {7: [0, 40, 80], 8: [i * 10 + 5 for i in range(9)], 9: [55]}
    assert rarer_periods(micro, 7) == {}
    assert rarer_periods(starts, None) == {}


def test_rarer_programs_pool_their_periods_and_keep_counts_without_them() -> None:
    # eval every 10 steps over samples of 25 steps: a window holding 3 evals, one holding 2
    ledger = JobLedger()
    for evals_at in ([0, 10, 20], [5, 15]):
        space = periodic_space(20.0, 25, offset_ms=3.0)
        line = space.planes[0].lines[0]
        for k, step in enumerate(evals_at):
            cpu_op(line, 11, 50_000 + k + 10 * len(evals_at), 0, 3.0 + step * 20.0 + 9.0, 0.5)
        ledger.add(parse(space, duration=0.52))
    rates = ledger.rates()
    assert rates.executions_per_step[7] == pytest.approx(1.0)
    assert rates.executions_per_step[11] == pytest.approx(0.1)
    # a program seen once per sample has no whole period: counted in the dominant's windows
    once = periodic_space(20.0, 25)
    cpu_op(once.planes[0].lines[0], 12, 90_000, 0, 3.0 + 7 * 20.0 + 9.0, 0.5)
    alone = JobLedger()
    alone.add(parse(once, duration=0.52))
    assert alone.rates().executions_per_step[12] == pytest.approx(1 / 24)


def test_samples_from_before_the_first_marked_step_leave_the_window() -> None:
    ledger = JobLedger()
    idle = parse(xp.XSpace(), duration=0.2, steps_marked=False)  # start-up: nothing ran
    ledger.add(idle)
    assert ledger.rates().samples == 1 and ledger.last_seen is None
    stepping = parse(periodic_space(20.0, 10), duration=0.2, step_begins=[0.0, 0.1],
                     steps_marked=True)  # fmt: skip
    ledger.add(stepping)
    now = ledger.rates()
    assert now.samples == 1  # the start-up sample no longer makes the devices look idle
    assert now.busy_ratio == ledger_rates([stepping]).busy_ratio
    # the program seen starting last: program 7, which starts every period (9 every other)
    assert stepping.last_started == 7 and ledger.last_seen == (7, 1000.2)
    ledger.add(parse(xp.XSpace(), duration=0.2, steps_marked=True))  # stalled: nothing ran
    assert ledger.rates().samples == 2 and ledger.last_seen == (7, 1000.2)


def program(fingerprint: str, ids: tuple[int, ...], flops: float | None, devices: int = 2,
            lower_bound: bool = False) -> Program:  # fmt: skip
    return Program(fingerprint=fingerprint, name=f"jit_{fingerprint}", flops=flops,
                   bytes_accessed=1e6, num_devices=devices, program_ids=ids,
                   flops_lower_bound=lower_bound)  # fmt: skip


def test_work_per_step_counts_every_program_as_often_as_it_ran() -> None:
    now = ledger_rates([parse(periodic_space(20.0, 10), duration=0.2)])
    step = rates.with_ledger(program("step", (7,), 1e9), now, steps_per_second=40.0)
    every_other = rates.with_ledger(program("eval", (9,), 1e8, 1), now, 40.0)
    idle = rates.with_ledger(program("warmup", (11,), 5e9), now, 40.0)
    assert step.executions_per_step == pytest.approx(1.0)
    assert step.executions_per_second == pytest.approx(40.0)  # markers' rate, not the sample's
    assert idle.executions_per_step == 0.0
    work = rates.executed_work([step, every_other, idle])
    assert work.flops_per_step == pytest.approx(2e9 + 1e8 * 0.5)  # every other step, exactly
    assert not work.lower_bound
    assert rates.step_program([step, every_other, idle]) is step


def test_ids_the_catalogue_does_not_hold_yet_are_matched_by_name_only_when_unambiguous() -> None:
    """Ops name their program: one id the job's catalogue does not hold yet (its ids come with
    the next report) stands for the newest program of that name. Several such ids under one
    name (two programs called jit_step, or one compiled anew each step) are left uncounted
    until the catalogue holds them, never all given to one program."""

    def space(programs: list[int]) -> xp.XSpace:
        plane = host_plane()
        plane.stat_metadata[MODULE].CopyFrom(xp.XStatMetadata(id=MODULE, name="hlo_module"))
        line = plane.lines.add(name="tf_XLAPjRtCpuClient/1")
        for i in range(10):  # each program once every 20 ms step, on two devices
            for k, program in enumerate(programs):
                for device in range(2):
                    cpu_op(line, program, 5000 + 10 * i + k, device, 3.0 + 20.0 * i + k, 1.0)
                    line.events[-1].stats.append(xp.XStat(metadata_id=MODULE,
                                                          str_value="jit_step"))  # fmt: skip
        return xp.XSpace(planes=[plane])

    def counted(programs: list[int], catalogue: list[Program]) -> list[Program]:
        now = ledger_rates([parse(space(programs), duration=0.2, steps_marked=True,
                                  step_begins=[0.003 + 0.02 * i for i in range(10)])])  # fmt: skip
        extra = rates.unclaimed_ids(catalogue, now)
        return [rates.with_ledger(p, now, 50.0, extra.get(p.fingerprint, ())) for p in catalogue]

    old = replace(program("old", (42,), 3e9), name="jit_step", compiled_at=1.0)
    new = replace(program("new", (), 1e9), name="jit_step", compiled_at=2.0)  # ids not yet in
    one = counted([100], [old, new])
    assert one[1].executions_per_step == pytest.approx(1.0, rel=0.15)
    assert rates.executed_work(one).flops_per_step == pytest.approx(2e9, rel=0.15)
    two = counted([100, 101], [old, new])
    assert [p.executions_per_step for p in two] == [0.0, None]  # ambiguous: unknown, not 2


def test_a_program_compiled_anew_every_step_counts_its_older_executables() -> None:
    """A function compiled again every step runs a new executable (a new module id) each step;
    the catalogue keeps a program's newest ids only. Where the samples show the ids it holds
    under that name, the older ids of the name are that program's older executables."""
    plane = host_plane()
    plane.stat_metadata[MODULE].CopyFrom(xp.XStatMetadata(id=MODULE, name="hlo_module"))
    line = plane.lines.add(name="tf_XLAPjRtCpuClient/1")
    for i in range(10):  # step i runs program 200 + i once, 3 ms after its begin at 20 ms * i
        # The newest run longest: the sample's busiest program ran after its last begin, so
        # it alone ran 0 times in the sample's 8 whole steps.
        cpu_op(line, 200 + i, 9000 + i, 0, 3.0 + 20.0 * i, 5.0 + i)
        line.events[-1].stats.append(xp.XStat(metadata_id=MODULE, str_value="jit_fresh"))
    space = anchored(xp.XSpace(planes=[plane]), at_ms=0.0)
    begins = [0.020 * i for i in range(9)]
    reading = parse(space, 0.2, step_begins=begins, steps_marked=True, anchor_seconds=0.0)
    assert reading.dominant == 209 and 209 not in reading.executions
    now = ledger_rates([reading])
    fresh = replace(program("fresh", (208, 209), 1e9), name="jit_fresh", compiled_at=9.0)
    extra = rates.unclaimed_ids([fresh], now)
    assert sorted(extra[fresh.fingerprint]) == list(range(200, 208))
    counted = rates.with_ledger(fresh, now, 50.0, extra[fresh.fingerprint])
    assert counted.executions_per_step == pytest.approx(1.0)  # 8 whole steps, 8 executions
    work = rates.executed_work([counted]).flops_per_step
    assert work == pytest.approx(1e9 * counted.num_devices)


def test_unknown_or_lower_bound_flops_make_the_step_a_lower_bound() -> None:
    now = ledger_rates([parse(periodic_space(20.0, 10), duration=0.2)])
    for other in (program("eval", (9,), None), program("eval", (9,), 1e8, lower_bound=True)):
        work = rates.executed_work([rates.with_ledger(p, now, None)
                                    for p in (program("step", (7,), 1e9), other)])  # fmt: skip
        assert work.lower_bound


def test_a_conditional_s_costliest_branch_counted_makes_the_step_an_upper_bound() -> None:
    now = ledger_rates([parse(periodic_space(20.0, 10), duration=0.2)])
    branchy = replace(program("eval", (9,), 1e8), flops_upper_bound=True)
    work = rates.executed_work([rates.with_ledger(p, now, None)
                                for p in (program("step", (7,), 1e9), branchy)])  # fmt: skip
    assert work.upper_bound and not work.lower_bound
    exact = rates.executed_work([rates.with_ledger(program("step", (7,), 1e9), now, None)])
    assert not exact.upper_bound


def test_before_any_sample_nothing_is_derived() -> None:
    empty = JobLedger().rates()
    p = program("step", (7,), 1e9)
    assert rates.with_ledger(p, empty, 10.0) is p
    assert rates.executed_work([p]).flops_per_step is None
    assert rates.step_program([p]) is None


def test_busy_ratio_maps_ordinals_to_device_ids() -> None:
    busy = {0: 0.5, 1: 0.25}
    assert rates.busy_by_device(busy, [8, 9, 10], {}) == {8: 0.5, 9: 0.25, 10: 0.0}
    assert rates.busy_by_device(busy, [8, 9], {8: 1, 9: 0}) == {8: 0.25, 9: 0.5}


def test_flops_per_token() -> None:
    assert rates.flops_per_token(1e9) == 6e9
    assert rates.flops_per_token(1e9, n_layers=2, context=8, d_model=4) == 6e9 + 12 * 2 * 8 * 4


def sample(**fields: Any) -> ExecutionSample:
    base: dict[str, Any] = {
        "started_at": 1000.0,
        "duration_seconds": 0.2,
        "xspace": periodic_space(20.0, 10).SerializeToString(),
    }
    base.update(fields)
    return ExecutionSample(**base)


def test_reader_parses_one_sample_at_a_time_and_refuses_implausible_ones() -> None:
    async def run() -> JobLedger:
        reader, ledger = LedgerReader(), JobLedger()
        assert reader.submit(ledger, sample())
        assert not reader.submit(ledger, sample())  # the first is still being read
        await reader.drain()
        for bad in (sample(duration_seconds=math.inf), sample(started_at=math.nan),
                    sample(duration_seconds=-1.0), sample(duration_seconds=3600.0),
                    sample(xspace=b"")):  # fmt: skip
            assert not reader.submit(ledger, bad)
        assert reader.submit(ledger, sample(xspace=b"\xff" * 10))
        await reader.drain()
        return ledger

    ledger = asyncio.run(run())
    assert ledger.rates().samples == 1
    assert ledger.samples_dropped_total == 6
    assert ledger.parse_errors_total == 1


@pytest.mark.parametrize(("ratio", "whole"), [
    (0.9, 1.0), (1.12, 1.0), (4.4, 4.0), (0.27, 0.25), (1.5, None), (0.4, None), (2.5, None),
    (0.0, None),
])  # fmt: skip
def test_dominant_executions_per_step_snap_to_whole_numbers(
    ratio: float, whole: float | None
) -> None:
    assert nearest_whole(ratio) == (None if whole is None else pytest.approx(whole))


@pytest.mark.parametrize(("ratios", "pooled", "expected"), [
    ([1.0, 1.02, 0.98, 1.0, 0.1], 0.82, 1.0),  # one sample descheduled: the median holds
    ([0.80, 0.83, 0.845, 1.1, 1.15], 0.945, 1.0),  # three ran ahead: the pooled ratio holds
    ([1.5, 1.45, 1.55], 1.5, 1.5),  # neither is whole: as measured
    ([3.9, 4.1, 4.0], 4.0, 4.0),  # 4 micro-steps
])  # fmt: skip
def test_the_ratio_a_step_is_whole_if_the_median_or_the_pooled_ratio_is(
    ratios: list[float], pooled: float, expected: float
) -> None:
    assert per_step_ratio(ratios, pooled) == pytest.approx(expected)


def test_jittery_step_markers_still_give_one_execution_a_step() -> None:
    # Markers bunched by asynchronous dispatch: 11 begins in 0.19 s while the program ran 10
    # times in 0.18 s; the ratio 0.96 is one execution a step.
    begins = [0.0, 0.001, 0.002, 0.05, 0.051, 0.09, 0.11, 0.13, 0.15, 0.17, 0.19]
    reading = parse(periodic_space(20.0, 10), 0.2, step_begins=begins, steps_marked=True)
    assert ledger_rates([reading]).executions_per_step[7] == pytest.approx(1.0)


def stepped_reading(executions: int, steps: float, whole_periods: bool = True) -> SampleReading:
    """A 1 s sample of a job marking steps, its dominant program 7 run ``executions`` times."""
    return SampleReading(
        started_at=0.0, duration_seconds=1.0, core_seconds=1.0, executions={7: executions},
        dominant=7, steps_marked=True, steps_in_core=steps, device_busy_seconds={0: 0.5},
        program_device_seconds={7: 0.5}, program_device_runs={7: executions},
        whole_periods=whole_periods,
    )  # fmt: skip


def unmarked_reading(dominant: int, executions: int, seconds: float) -> SampleReading:
    """A 1 s sample of a job that marks no steps, its busiest program ``dominant``."""
    return SampleReading(
        started_at=0.0, duration_seconds=1.0, core_seconds=1.0, executions={dominant: executions},
        dominant=dominant, steps_marked=False, steps_in_core=float(executions),
        device_busy_seconds={0: seconds}, program_device_seconds={dominant: seconds},
        program_device_runs={dominant: executions}, whole_periods=True,
    )  # fmt: skip


def test_inferred_steps_are_the_runs_of_the_window_s_busiest_program() -> None:
    """A job with no markers: its first sample saw 849 small data-loading programs a second
    (busiest then), the rest its train step at 7.6 a second. Each sample's steps were its own
    busiest program's runs: the rate was ~100x the job's until that sample left the window."""
    first = unmarked_reading(dominant=3, executions=849, seconds=0.3)
    steady = [unmarked_reading(dominant=7, executions=8, seconds=0.8) for _ in range(3)]
    rates = ledger_rates([first, *steady])
    assert rates.steps_per_second == pytest.approx(8.0)
    assert rates.executions_per_step[7] == pytest.approx(1.0)


def test_markers_running_ahead_in_bursts_pool_to_one_execution_a_step() -> None:
    # Measured under load: the host's markers ran ahead of the device in one sample (0.87) and
    # the device caught up in the next (1.16). Three samples in five ran ahead: their median
    # (0.84) is no whole number; pooled over the samples the bursts cancel.
    readings = [stepped_reading(n, 100.0) for n in (80, 120, 82, 118, 84)]
    rates = ledger_rates(readings)
    assert rates.executions_per_step[7] == pytest.approx(1.0)
    assert rates.steps_per_second == pytest.approx(484 / 5.0)
    # A sample in which the job was descheduled moves the pooled ratio, not the median.
    readings = [stepped_reading(n, 100.0) for n in (100, 102, 98, 100, 10)]
    assert ledger_rates(readings).executions_per_step[7] == pytest.approx(1.0)


def test_a_sample_without_whole_periods_gives_no_ratio() -> None:
    # The job's first marked steps at the very end of a sample: 2 begins 10 ms apart (100
    # steps/s) and 1 execution; the rate it shows is no rate of the job's.
    first = stepped_reading(1, 102.0, whole_periods=False)
    steady = [stepped_reading(50, 50.0) for _ in range(4)]
    rates = ledger_rates([first, *steady])
    assert rates.executions_per_step[7] == pytest.approx(1.0)
    assert rates.steps_per_second == pytest.approx(50.0)
    # Steps longer than a sample: no sample has whole periods, and they are all there is.
    slow = [stepped_reading(1, 0.5, whole_periods=False) for _ in range(4)]
    assert ledger_rates(slow).executions_per_step[7] == pytest.approx(2.0)


def alternating_space(period_ms: float, steps: int, eval_ms: float) -> xp.XSpace:
    """Program 7 every step (2 ms); program 9 every other step, taking ``eval_ms``."""
    plane = host_plane()
    line = plane.lines.add(name="tf_XLAPjRtCpuClient/1")
    run = 0
    for i in range(steps):
        start = 1.0 + i * period_ms
        run += 1
        cpu_op(line, 7, run, 0, start, 2.0)
        if i % 2 == 0:
            run += 1
            cpu_op(line, 9, run, 0, start + 3.0, eval_ms)
    return xp.XSpace(planes=[plane])


def test_samples_whose_dominant_programs_differ_count_steps_alike() -> None:
    # The every-other-step program takes 5 ms (dominant) in one sample, 3 ms in the other
    # (program 7 dominant with 2 ms a step against 1.5 ms): both give one step a period.
    begins = [0.0005 + 0.010 * i for i in range(40)]
    first = parse(alternating_space(10.0, 40, 5.0), 0.4, step_begins=begins, steps_marked=True)
    second = parse(alternating_space(10.0, 40, 3.0), 0.4, step_begins=begins, steps_marked=True)
    assert (first.dominant, second.dominant) == (9, 7)
    per_step = ledger_rates([first, second]).executions_per_step
    assert per_step[7] == pytest.approx(1.0, abs=0.03)
    assert per_step[9] == pytest.approx(0.5, abs=0.03)


def test_samples_from_before_the_first_marked_step_count_no_steps() -> None:
    start_up = parse(alternating_space(10.0, 40, 5.0), 0.4)  # no markers yet: init programs
    begins = [0.0005 + 0.020 * i for i in range(20)]
    stepping = parse(periodic_space(20.0, 10), 0.2, step_begins=begins, steps_marked=True)
    per_step = ledger_rates([start_up, stepping]).executions_per_step
    # what ran at start-up is not part of a step (program 9 ran 20 times there)
    assert per_step == {7: pytest.approx(1.0), 9: pytest.approx(0.5)}


def test_a_job_without_markers_is_asked_for_samples_that_hold_whole_periods() -> None:
    # Steps of 150 ms in a 200 ms sample: two starts, one period; 3.5 periods are asked for.
    two = parse(periodic_space(150.0, 2), duration=0.2)
    assert not two.whole_periods and two.dominant_period == pytest.approx(0.150)
    assert unmarked_sample_seconds(two) == pytest.approx(0.525)
    # One start (a step longer than the sample): four times as long, then as asked.
    one = parse(periodic_space(300.0, 1), duration=0.2)
    assert one.dominant_period is None and unmarked_sample_seconds(one) == pytest.approx(0.8)
    whole = parse(periodic_space(20.0, 10), duration=0.2)
    assert unmarked_sample_seconds(whole) is None  # whole periods: as configured
    marked = parse(periodic_space(150.0, 2), 0.2, step_begins=[0.01], steps_marked=True)
    assert unmarked_sample_seconds(marked) is None  # markers: the agent holds whole steps
    huge = replace(two, dominant_period=1000.0)
    assert unmarked_sample_seconds(huge) == SAMPLE_RECORD_MAX_SECONDS
    # The ledger asks for the longest length wanted so far, never shorter again.
    ledger = JobLedger()
    assert ledger.sample_seconds_wanted is None
    for reading, wanted in ((one, 0.8), (two, 0.8), (whole, 0.8)):
        ledger.add(reading)
        assert ledger.sample_seconds_wanted == pytest.approx(wanted)


def test_the_busy_share_of_stepping_counts_the_samples_that_stepped_throughout() -> None:
    """Over the job's life: samples that stepped throughout count; one taken through a stall
    (no steps), and one whose steps covered only a third of it (it straddled the end of
    training), do not. Window bounds do not drop the life's samples."""
    ledger = JobLedger(window_samples=2)
    for busy in (0.4, 0.6, 0.5):
        ledger.add(replace(stepped_reading(10, 10.0), device_busy_seconds={0: busy}))
    ledger.add(replace(stepped_reading(0, 0.0), steps_in_core=0.0, device_busy_seconds={}))
    ledger.add(replace(stepped_reading(3, 3.0), core_seconds=0.33, device_busy_seconds={0: 0.2}))
    assert ledger.stepping_busy_ratio() == {0: pytest.approx(0.5)}
    assert JobLedger().stepping_busy_ratio() == {}
    # a job's initialisation, sampled before its first marked step, is not its steps
    marked_later = JobLedger()
    marked_later.add(unmarked_reading(3, 50, 0.95))
    marked_later.add(replace(stepped_reading(10, 10.0), device_busy_seconds={0: 0.4}))
    assert marked_later.stepping_busy_ratio() == {0: pytest.approx(0.4)}
    unmarked = JobLedger()
    unmarked.add(unmarked_reading(7, 8, 0.8))
    unmarked.add(unmarked_reading(7, 8, 0.6))
    assert unmarked.stepping_busy_ratio() == {0: pytest.approx(0.7)}


def test_busy_seconds_per_marked_step_are_the_cores_busy_seconds_over_their_steps() -> None:
    """The profiler slows a job's host side while it records: samples held 10 and then 12
    steps a second of a job that runs 12.3 outside them; each step's 60 ms of device work is
    the same in both. Busy seconds per step: the cores' busy seconds over the steps they held."""
    ledger = JobLedger()
    assert ledger.stepping_device_seconds_per_step() == {}
    ledger.add(replace(stepped_reading(10, 10.0), core_busy_seconds={0: 0.60, 1: 0.01}))
    ledger.add(replace(stepped_reading(12, 12.0), core_busy_seconds={0: 0.72, 1: 0.01}))
    per_step = ledger.stepping_device_seconds_per_step()
    assert per_step == {0: pytest.approx(0.06), 1: pytest.approx(0.02 / 22)}
    # one device of four computes: the step's share is that device's, not the mean of four
    share = rates.marked_step_busy_share(per_step, steps=100, stepping_seconds=8.1)
    assert share == pytest.approx(6.0 / 8.1)
    assert rates.marked_step_busy_share(per_step, steps=1000, stepping_seconds=8.1) == 1.0
    assert rates.marked_step_busy_share({}, steps=100, stepping_seconds=8.1) is None
    assert rates.marked_step_busy_share(per_step, steps=0, stepping_seconds=8.1) is None
    unmarked = JobLedger()
    unmarked.add(replace(unmarked_reading(7, 8, 0.8), core_busy_seconds={0: 0.8}))
    assert unmarked.stepping_device_seconds_per_step() == {}  # no step count to multiply


def test_busy_seconds_per_marked_step_leave_out_the_sample_s_lead_in_and_tail() -> None:
    """A job of 20 ms steps that compiles a new shape every third step (170 ms, the devices
    idle): a 0.2 s sample started inside one step and stopped inside a compiling one, its core
    two short steps (42 ms) of it. The core's steps count, though they covered a fifth of the
    sample; the time outside them does not. A sample without a core (counts over the whole
    sample, a guess of its steps) and one whose core held no step count nothing."""
    ledger = JobLedger()
    lead_and_tail = SampleReading(
        started_at=0.0, duration_seconds=0.2, core_seconds=0.042, executions={7: 8}, dominant=7,
        steps_marked=True, steps_in_core=2.0, device_busy_seconds={0: 0.03, 1: 0.03},
        program_device_seconds={7: 0.06}, program_device_runs={7: 8}, whole_periods=True,
        core_busy_seconds={0: 0.02, 1: 0.02},
    )  # fmt: skip
    ledger.add(lead_and_tail)
    assert ledger.stepping_device_seconds_per_step() == {0: 0.01, 1: 0.01}
    assert ledger.stepping_busy_ratio() == {}  # its steps did not cover 70 % of it
    ledger.add(replace(lead_and_tail, whole_periods=False, core_busy_seconds=None))
    ledger.add(replace(lead_and_tail, steps_in_core=0.0, core_busy_seconds={0: 0.1}))
    ledger.add(replace(lead_and_tail, steps_in_core=float("nan"), core_busy_seconds={0: 0.1}))
    # a long step's one execution on four devices: a core of their starts, a sliver of a step
    ledger.add(replace(lead_and_tail, steps_in_core=0.004, core_busy_seconds={0: 1e-5}))
    assert ledger.stepping_device_seconds_per_step() == {0: 0.01, 1: 0.01}


def _with_eval(evals_at: Sequence[int], steps: int = 10, eval_ms: float = 10.0) -> SampleReading:
    """``periodic_space`` with program 11 (an eval) after the given steps."""
    space = periodic_space(20.0, steps)
    for k, step in enumerate(evals_at):
        cpu_op(space.planes[0].lines[0], 11, 70_000 + k, 0, 3.0 + step * 20.0 + 9.0, eval_ms)
    return parse(space, duration=0.2)


def test_a_program_too_rare_for_two_runs_a_sample_asks_for_longer_samples() -> None:
    ledger = JobLedger()
    ledger.add(_with_eval([]))
    ledger.add(_with_eval([4]))
    # one eval in 18 periods of 20 ms (two samples' core windows): a period of 0.36 s, and
    # samples of 2.5 periods hold two of its starts
    assert ledger.sample_seconds_wanted == pytest.approx(RARER_PERIODS_WANTED * 0.36)
    # one eval in six samples: 2.5 periods of 1.08 s
    rare = JobLedger()
    rare.add(_with_eval([4]))
    for _ in range(5):
        rare.add(_with_eval([]))
    assert rare.sample_seconds_wanted == pytest.approx(RARER_PERIODS_WANTED * 1.08)
    # at most RARER_SAMPLE_MAX_SECONDS, and no longer than the job's samples take to reach
    # RARER_SAMPLE_BYTES: past them, samples near their bounds
    rarest = JobLedger()
    rarest.add(replace(_with_eval([4]), core_seconds=10.0))  # one eval in 10 s
    assert rarest.sample_seconds_wanted == RARER_SAMPLE_MAX_SECONDS
    dense = JobLedger()
    for evals in ([4], []):
        dense.add(replace(_with_eval(evals), recorded_bytes=RARER_SAMPLE_BYTES // 2))
    assert dense.sample_seconds_wanted == pytest.approx(0.4)  # 2 MiB at 1/2 of it per 0.2 s
    # readings of no length (the intake refuses such samples) give no byte rate, not an error
    timeless = [replace(_with_eval(evals), duration_seconds=0.0) for evals in ([4], [])]
    assert rarer_sample_seconds(timeless) == pytest.approx(RARER_PERIODS_WANTED * 0.36)
    # a program whose device time is too small to move the step's work is not waited for
    tiny = JobLedger()
    tiny.add(_with_eval([4], eval_ms=0.01))
    assert tiny.sample_seconds_wanted is None
    # long steps: every program runs once a sample, none rarer than the step's
    long_steps = JobLedger()
    for _ in range(2):  # 300 ms steps of program 7 and 11 (as in the test of long steps)
        space = xp.XSpace(planes=[host_plane()])
        line = space.planes[0].lines.add(name="tf_XLAPjRtCpuClient/1")
        for i, start in enumerate((4.5, 304.5)):
            cpu_op(line, 7, 100 + i, 0, start, 150.0)
            cpu_op(line, 11, 200 + i, 0, start + 160.0, 100.0)
        anchored(space, at_ms=2.0)
        long_steps.add(parse(space, 0.5, step_begins=[0.002, 0.302], steps_marked=True,
                             anchor_seconds=0.0005))  # fmt: skip
    assert long_steps.rates().executions_per_step == {7: 1.0, 11: 1.0}
    assert long_steps.sample_seconds_wanted is None
    # samples holding two of its runs count it over its own periods: nothing to ask
    held = JobLedger()
    held.add(_with_eval([1, 6]))
    assert held.sample_seconds_wanted is None
    assert held.rates().executions_per_step[11] == pytest.approx(0.2)


def test_a_length_asked_before_the_first_marked_step_is_taken_back() -> None:
    # Start-up without markers: one start of its busiest program in a 0.2 s sample asks for
    # four times as long
    ledger = JobLedger()
    ledger.add(parse(periodic_space(20.0, 1), duration=0.2))
    assert ledger.sample_seconds_wanted == pytest.approx(0.8)
    begins = [0.0005 + 0.020 * i for i in range(10)]
    ledger.add(parse(periodic_space(20.0, 10), 0.2, step_begins=begins, steps_marked=True))
    assert ledger.sample_seconds_wanted == 0.0  # as configured: marked samples hold whole steps
    assert ledger.sample_seconds_asked is None  # and views show no ask


def test_a_sample_refused_for_its_events_asks_the_job_for_shorter_ones() -> None:
    """More events than a sample may hold (a job of many small ops, fast steps): the read
    stops at the bound, and the job is asked for samples half as long, which can be read."""
    many = periodic_space(0.01, 8500, devices=8)  # 16 events a period: past 131,072

    async def run() -> tuple[LedgerReader, JobLedger]:
        reader, ledger = LedgerReader(), JobLedger()
        assert reader.submit(ledger, sample(duration_seconds=0.4, xspace=many.SerializeToString()))
        await reader.drain()
        return reader, ledger

    reader, ledger = asyncio.run(run())
    assert reader.refused["xspace_events"] == 1 and ledger.samples_dropped_total == 1
    assert ledger.sample_seconds_most == pytest.approx(0.2)
    assert ledger.sample_seconds_wanted is None  # the limit is asked on its own


def test_each_refusal_for_size_halves_the_length_down_to_the_shortest_sample() -> None:
    ledger = JobLedger()
    ledger.refused_as_too_large(1.0)
    assert ledger.sample_seconds_most == 0.5
    ledger.refused_as_too_large(4.0)  # an older, longer sample: the limit stays
    assert ledger.sample_seconds_most == 0.5
    ledger.refused_as_too_large(0.5)
    assert ledger.sample_seconds_most == 0.25
    for nonsense in (math.nan, math.inf, 0.0, -1.0):
        ledger.refused_as_too_large(nonsense)
        assert ledger.sample_seconds_most == 0.25
    ledger.refused_as_too_large(0.001)
    assert ledger.sample_seconds_most == SAMPLE_MIN_SECONDS


# --- conditionals: the branches a sample saw run -----------------------------------------------

BRANCHY = Conditional(
    name="cond.1",
    branches=(Branch(1e6, 4e3, ("scale_fusion",)), Branch(9e6, 8e3, ("dot_fusion",))),
    counted_flops=9e6,
    counted_bytes_accessed=8e3,
)


def branch_space(taken: Sequence[int], devices: int = 2) -> xp.XSpace:
    """Program 7 every 10 ms on each device: its conditional, then the branch ``taken[i]``
    (its op), as the CPU backend records them (one run id an execution and device)."""
    plane = host_plane()
    line = plane.lines.add(name="tf_XLAExecute/1")

    def op(name: str, run: int, device: int, at_ms: float, length_ms: float) -> None:
        line.events.append(xp.XEvent(
            offset_ps=int(at_ms * MS), duration_ps=int(length_ms * MS),
            stats=[xp.XStat(metadata_id=PROGRAM, int64_value=7),
                   xp.XStat(metadata_id=RUN, int64_value=run),
                   xp.XStat(metadata_id=ORDINAL, int64_value=device),
                   xp.XStat(metadata_id=OP, str_value=name)]))  # fmt: skip

    for i, branch in enumerate(taken):
        for device in range(devices):
            run = 100 * i + device
            at = 2.0 + 10.0 * i
            op("input_fusion", run, device, at, 0.5)
            op("cond.1", run, device, at + 1.0, 3.0)
            op(BRANCHY.branches[branch].ops[0], run, device, at + 1.5, 2.0 if branch else 0.5)
    return xp.XSpace(planes=[plane])


def test_a_sample_counts_the_branches_of_the_conditionals_it_is_asked_about() -> None:
    taken = [1, 0, 0, 0, 1, 0, 0, 0, 1, 0]
    space = branch_space(taken)
    reading = parse(space, 0.1, conditionals={7: (BRANCHY,)})
    found = reading.branch_tallies[(7, "cond.1")]
    # on each of two devices: 9 whole executions, the costly branch in 3 of them (the 1st, 5th
    # and 9th): a third, where it runs one in four, as its own whole periods say
    assert (found.executions, found.conditional_runs, found.branch_runs) == (18, 18, (12, 6))
    mix = ledger_rates([reading]).branch_mixes[(7, "cond.1")]
    assert mix.shares == pytest.approx((0.75, 0.25)) and mix.runs_per_execution == 1.0
    # not asked about: nothing kept of its ops
    assert parse(space, 0.1).branch_tallies == {}


def test_a_program_counts_the_branches_that_ran_instead_of_the_costliest() -> None:
    reading = parse(branch_space([1, 0, 0, 0] * 3), 0.12, conditionals={7: (BRANCHY,)})
    ledger = ledger_rates([reading])
    program = Program(
        fingerprint="f", name="jit_step", flops=10e6, bytes_accessed=9e3,
        flops_upper_bound=True, conditionals=(BRANCHY,), program_ids=(7,),
    )  # fmt: skip
    counted = rates.with_ledger(program, ledger, steps_per_second=None)
    assert counted.flops_branch_mix and not counted.flops_upper_bound
    assert counted.flops == pytest.approx(10e6 - 9e6 + 0.75 * 1e6 + 0.25 * 9e6)
    assert counted.bytes_accessed == pytest.approx(9e3 - 8e3 + 0.75 * 4e3 + 0.25 * 8e3)
    # a conditional the samples never saw run leaves the bound as it is
    other = replace(BRANCHY, name="cond.2")
    unseen = rates.with_ledger(replace(program, conditionals=(BRANCHY, other)), ledger, None)
    assert unseen.flops == 10e6 and unseen.flops_upper_bound and not unseen.flops_branch_mix


def gpu_branch_plane(device: int, taken: Sequence[int]) -> xp.XPlane:
    """A GPU's plane: program 3's module event each execution (no run id) on its "XLA Modules"
    line, and on its stream the kernel of the branch taken (its HLO op named); the conditional
    itself runs on the host and has no event."""
    plane = xp.XPlane(name=f"/device:GPU:{device}")
    for key, name in ((PROGRAM, "program_id"), (OP, "hlo_op")):
        plane.stat_metadata[key].CopyFrom(xp.XStatMetadata(id=key, name=name))
    plane.event_metadata[5].CopyFrom(xp.XEventMetadata(id=5, name="jit_step", stats=[
        xp.XStat(metadata_id=PROGRAM, int64_value=3)]))  # fmt: skip
    for k, op in enumerate(("scale_fusion", "dot_fusion")):
        plane.event_metadata[6 + k].CopyFrom(xp.XEventMetadata(id=6 + k, name=op, stats=[
            xp.XStat(metadata_id=PROGRAM, int64_value=3),
            xp.XStat(metadata_id=OP, str_value=op)]))  # fmt: skip
    modules = plane.lines.add(name="XLA Modules", timestamp_ns=1_000)
    stream = plane.lines.add(name="Stream #14(Compute)", timestamp_ns=1_000)
    for i, branch in enumerate(taken):
        at = 10.0 * i
        modules.events.append(xp.XEvent(metadata_id=5, offset_ps=int(at * MS), duration_ps=5 * MS))
        stream.events.append(xp.XEvent(metadata_id=6 + branch, offset_ps=int((at + 1) * MS),
                                       duration_ps=3 * MS))  # fmt: skip
    return plane


def test_gpu_branches_are_counted_from_their_kernels_over_each_device_s_module_events() -> None:
    taken = [1, 0, 0, 0] * 3 + [1]
    space = xp.XSpace(planes=[gpu_branch_plane(0, taken), gpu_branch_plane(1, taken)])
    reading = parse(space, 0.13, conditionals={3: (BRANCHY,)})
    found = reading.branch_tallies[(3, "cond.1")]
    assert (found.executions, found.conditional_runs) == (24, 24)  # 12 whole on each device
    mix = ledger_rates([reading]).branch_mixes[(3, "cond.1")]
    assert mix.shares == pytest.approx((0.75, 0.25)) and mix.runs_per_execution == 1.0
