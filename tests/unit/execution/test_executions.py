"""Counting program executions in traces built with the XSpace stubs, the files' guards, and
how the counts reach a job's programs (xmon.execution.xplane, xmon.daemon.executions)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from xmon.daemon.executions import ExecutionTracker, TraceExecutions, with_executions
from xmon.execution.xplane import TraceUnreadable, count_executions, count_files, map_trace
from xmon.model import Job, Program
from xmon.wire.proto import xplane_pb2 as xp

PROGRAM, RUN, OTHER = 1, 2, 3  # stat metadata ids


def plane(name: str = "/device:CPU:0", *extra_stats: tuple[int, str]) -> xp.XPlane:
    p = xp.XPlane(name=name)
    for key, stat_name in ((PROGRAM, "program_id"), (RUN, "run_id"), (OTHER, "hlo_op"),
                           *extra_stats):  # fmt: skip
        p.stat_metadata[key].CopyFrom(xp.XStatMetadata(id=key, name=stat_name))
    return p


def stat(key: int, **value: object) -> xp.XStat:
    return xp.XStat(metadata_id=key, **value)


def op(line: xp.XLine, program: int | None, run: int | None, metadata_id: int = 0) -> None:
    """One op event, as XLA's CPU and TPU tracing records them: ids on the event."""
    stats = [stat(OTHER, str_value="fusion.1")]
    if program is not None:
        stats.append(stat(PROGRAM, int64_value=program))
    if run is not None:
        stats.append(stat(RUN, int64_value=run))
    line.events.append(xp.XEvent(metadata_id=metadata_id, offset_ps=1, stats=stats))


def cpu_space() -> xp.XSpace:
    """Program 4 ran 3 times (2 ops each) on two devices; program 10 ran once."""
    space = xp.XSpace()
    for device in range(2):
        p = space.planes.add()
        p.CopyFrom(plane(f"/device:CPU:{device}"))
        line = p.lines.add(name="ops")
        for run in (100, 101, 102):
            op(line, 4, run)
            op(line, 4, run)
        if device == 0:
            op(line, 10, 103)
        op(line, None, None)  # an event of no program
    return space


def test_distinct_runs_per_program_across_devices() -> None:
    assert count_executions([cpu_space()]) == {4: 3, 10: 1}


def test_ids_on_the_event_metadata_and_as_other_value_kinds() -> None:
    p = plane("/host:CPU", (40, "42"), (41, "not a number"))
    p.event_metadata[7].CopyFrom(xp.XEventMetadata(id=7, name="jit_f", stats=[
        stat(PROGRAM, ref_value=40)]))  # fmt: skip
    p.event_metadata[8].CopyFrom(xp.XEventMetadata(id=8, name="jit_g", stats=[
        stat(PROGRAM, uint64_value=5), stat(RUN, int64_value=1)]))  # fmt: skip
    p.event_metadata[9].CopyFrom(xp.XEventMetadata(id=9, name="bad", stats=[
        stat(PROGRAM, ref_value=41)]))  # fmt: skip
    line = p.lines.add(name="thread")
    for run in range(4):  # program 42 from the metadata's ref value, run ids as strings
        line.events.append(xp.XEvent(metadata_id=7, stats=[stat(RUN, str_value=str(run))]))
    line.events.append(xp.XEvent(metadata_id=8))  # both ids from the metadata
    line.events.append(xp.XEvent(metadata_id=8, stats=[stat(RUN, uint64_value=2)]))  # event wins
    line.events.append(xp.XEvent(metadata_id=9, stats=[stat(RUN, int64_value=1)]))
    assert count_executions([xp.XSpace(planes=[p])]) == {42: 4, 5: 2}


def gpu_plane(device: int, events: int, with_runs: bool = False) -> xp.XPlane:
    """A GPU device plane: an "XLA Modules" line, one event per execution, the program id on
    the event metadata; kernels on a stream line carry no ids."""
    p = plane(f"/device:GPU:{device}")
    p.event_metadata[1].CopyFrom(xp.XEventMetadata(id=1, name="jit_step(77)", stats=[
        stat(PROGRAM, int64_value=77)]))  # fmt: skip
    modules = p.lines.add(name="XLA Modules")
    for n in range(events):
        stats = [stat(RUN, int64_value=500 + n)] if with_runs else []
        modules.events.append(xp.XEvent(metadata_id=1, offset_ps=n, stats=stats))
    kernels = p.lines.add(name="Stream #13(Compute)")
    kernels.events.extend(xp.XEvent(metadata_id=2) for _ in range(10))
    return p


def test_gpu_module_line_counts_executions_once_per_device() -> None:
    space = xp.XSpace(planes=[gpu_plane(0, 6), gpu_plane(1, 6), gpu_plane(2, 5)])
    assert count_executions([space]) == {77: 6}
    with_runs = xp.XSpace(planes=[gpu_plane(0, 6, True), gpu_plane(1, 6, True)])
    assert count_executions([with_runs]) == {77: 6}


def test_aggregated_module_events_count_their_occurrences() -> None:
    p = gpu_plane(0, 0)
    p.lines[0].events.append(xp.XEvent(metadata_id=1, num_occurrences=9))
    assert count_executions([xp.XSpace(planes=[p])]) == {77: 9}


def test_planes_without_program_stats_and_empty_traces_count_nothing() -> None:
    python = xp.XPlane(name="/host:python")
    python.stat_metadata[1].CopyFrom(xp.XStatMetadata(id=1, name="run_id"))
    python.lines.add(name="main").events.append(xp.XEvent(stats=[stat(1, int64_value=3)]))
    assert count_executions([xp.XSpace(planes=[python]), xp.XSpace()]) == {}


def test_one_capture_of_several_files_counts_each_run_once() -> None:
    assert count_executions([cpu_space(), cpu_space()]) == {4: 3, 10: 1}


# --- files ------------------------------------------------------------------------------------


def write(path: Path, space: xp.XSpace) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(space.SerializeToString())
    return path


def test_files_are_read_and_counted(tmp_path: Path) -> None:
    trace = write(tmp_path / "plugins/profile/s/host.xplane.pb", cpu_space())
    assert count_files([str(trace)], tmp_path) == {4: 3, 10: 1}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("host.xplane.pb", cpu_space().SerializeToString()[:-3], "is not a readable trace"),
        ("host.xplane.pb", b"\x1f\x8b\x08\x00 gzip, not a trace", "is not a readable trace"),
        ("host.xplane.pb", b"x" * 2000, "more than the 1000 counted"),
        ("host.trace.json.gz", b"", "is not an .xplane.pb file"),
    ],
)
def test_unreadable_files_are_named_in_the_error(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceUnreadable, match=message) as raised:
        count_files([str(path)], tmp_path, max_bytes=1000)
    assert str(path) in str(raised.value)


def test_files_outside_the_run_or_behind_links_are_not_read(tmp_path: Path) -> None:
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    outside = write(elsewhere / "host.xplane.pb", cpu_space())
    with pytest.raises(TraceUnreadable, match="outside the capture's directory"):
        map_trace(outside, run)
    (run / "s").mkdir(parents=True)
    (run / "s" / "host.xplane.pb").symlink_to(outside)
    with pytest.raises(TraceUnreadable, match="outside the capture's directory"):
        map_trace(run / "s" / "host.xplane.pb", run)
    inside = write(run / "t" / "real.xplane.pb", cpu_space())
    (run / "t" / "link.xplane.pb").symlink_to(inside)
    with pytest.raises(TraceUnreadable, match="cannot open"):
        map_trace(run / "t" / "link.xplane.pb", run)
    os.mkfifo(run / "t" / "fifo.xplane.pb")
    with pytest.raises(TraceUnreadable, match="not a regular file"):
        map_trace(run / "t" / "fifo.xplane.pb", run)
    with pytest.raises(TraceUnreadable, match="cannot open"):
        map_trace(run / "t" / "missing.xplane.pb", run)


# --- programs ---------------------------------------------------------------------------------

TRACE = TraceExecutions({4: 30, 6: 2, 99: 5}, window_seconds=2.0, ended_at=1000.0)


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        (Program("a", "jit_a", program_ids=(4,), compiled_at=900.0), (30, 15.0)),
        (Program("b", "jit_b", program_ids=(4, 6, 4)), (32, 16.0)),  # recompiled: both count
        (Program("c", "jit_c", program_ids=(5,)), (0, 0.0)),  # did not run in the trace
        (Program("d", "jit_d"), (None, None)),  # module ids unknown
        (Program("e", "jit_e", program_ids=(4,), compiled_at=1001.0), (None, None)),  # too new
        # the execution ledger counted after the trace ended: its counts stand
        (
            Program(
                "f",
                "jit_f",
                program_ids=(4,),
                executions=7,
                executions_per_second=3.5,
                executions_counted_at=1001.0,
                executions_source="ledger",
            ),
            (7, 3.5),
        ),
    ],
)
def test_programs_get_the_executions_of_their_module_ids(
    program: Program, expected: tuple[int | None, float | None]
) -> None:
    got = with_executions(program, TRACE)
    assert (got.executions, got.executions_per_second) == expected
    if program.executions_source == "ledger":
        assert got is program
    elif expected[0] is not None:
        assert (got.executions_window_seconds, got.executions_counted_at) == (2.0, 1000.0)
        assert got.executions_source == "capture"


def job(pid: int, *programs: Program) -> Job:
    return Job("train", pid, "node0", "cpu", "0.10.2", "0.10.2", programs=programs)


def test_tracker_counts_off_the_loop_keeps_old_counts_on_failure_and_forgets_gone_jobs(
    tmp_path: Path,
) -> None:
    tracker = ExecutionTracker(wall=lambda: 2000.0)
    good = write(tmp_path / "run/plugins/profile/a/host.xplane.pb", cpu_space())
    bad = write(tmp_path / "run/plugins/profile/b/host.xplane.pb", cpu_space())
    bad.write_bytes(bad.read_bytes()[:-3])
    f, other = Program("fp-f", "jit_f", program_ids=(4,)), Program("fp-g", "jit_g")
    jobs = (job(1, f, other), job(2, f))
    assert tracker.annotate(jobs) == jobs, "nothing counted yet"

    counted = asyncio.run(tracker.count(1, [str(good)], tmp_path / "run", 1.5))
    assert counted is not None and counted.counts == {4: 3, 10: 1}
    first = tracker.annotate(jobs)
    assert first[0].programs[0].executions == 3
    assert first[0].programs[0].executions_per_second == pytest.approx(2.0)
    assert first[0].programs[1] is other and first[1] is jobs[1], "other jobs untouched"
    assert tracker.annotate(jobs)[0].programs[0] is first[0].programs[0], "reused per tick"

    assert asyncio.run(tracker.count(1, [str(bad)], tmp_path / "run", 1.0)) is None
    assert tracker.annotate(jobs)[0].programs[0].executions == 3, "the last readable trace"

    assert tracker.annotate((jobs[1],)) == (jobs[1],)
    assert tracker.annotate(jobs) == jobs, "job 1 went away: its counts are gone"
