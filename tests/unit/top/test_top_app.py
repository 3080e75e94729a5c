"""``xmon top`` driven by textual's pilot with constructed snapshot streams."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

from xmon.model import Snapshot
from xmon.top.app import XmonTop
from xmon.top.feed import FeedEvent, FeedStatus
from xmon.top.help import CAPTURE_UNAVAILABLE, HelpScreen
from xmon.top.memory import MemoryTree
from xmon.top.panels import NO_DEVICES
from xmon.top.tables import MAX_PROGRAM_ROWS, SortableTable

from support.top_app import Events, screen_text, sees, top, until
from support.views import job, snapshot, tpu_device


async def show(pilot: Pilot[Any], app: XmonTop, feed: Events, snap: Snapshot) -> None:
    feed.put(snap)
    await until(pilot, lambda: app.snapshot is not None and app.snapshot.seq == snap.seq)


def three_jobs(seq: int = 1) -> Snapshot:
    jobs = (
        job("alpha", 101, devices=2, in_use=3 * 2**30, mfu=0.2, step_seconds=0.3),
        job("beta", 102, devices=1, in_use=1 * 2**30, mfu=0.6, step_seconds=0.1),
        job("gamma", 103, devices=1, in_use=2 * 2**30, mfu=None, step_seconds=0.9),
    )
    return snapshot(seq, jobs=jobs)


def order(app: XmonTop, selector: str = "#jobs") -> list[str]:
    return list(app.query_one(selector, SortableTable).keys)


def test_pilot_views_switch_with_keys() -> None:
    async def scenario() -> None:
        async with top(three_jobs()) as (app, pilot, _):
            assert app.view == "overview"
            for key, view in [("m", "memory"), ("p", "programs"), ("c", "compiles"),
                              ("h", "history"), ("f", "findings"), ("o", "overview"),
                              ("v", "memory"), ("V", "overview"), ("V", "findings")]:  # fmt: skip
                await pilot.press(key)
                await until(pilot, lambda view=view: app.view == view)
            await pilot.press("p")
            await until(pilot, lambda: len(order(app, "#programs-table")) == 9)
            await sees(pilot, app, "jit_alpha_0")
            await pilot.press("c")
            await until(pilot, lambda: len(order(app, "#compiles-table")) == 15)
            await sees(pilot, app, "jit(beta_f4)")

    asyncio.run(scenario())


def test_pilot_sort_cycles_columns_and_reverses() -> None:
    async def scenario() -> None:
        async with top(three_jobs()) as (app, pilot, _):
            table = app.query_one("#jobs", SortableTable)
            assert table.sort_label == "MEMORY" and order(app) == ["101", "103", "102"]
            await pilot.press("s")  # STEP, longest first
            assert table.sort_label == "STEP" and order(app) == ["103", "101", "102"]
            await pilot.press("s", "s")  # MFU, unknown last
            assert table.sort_label == "MFU" and order(app) == ["102", "101", "103"]
            await pilot.press("r")  # ascending; unknown still last
            assert order(app) == ["101", "102", "103"]
            await sees(pilot, app, "sorted by MFU ascending")
            await pilot.press("p", "s")  # the programs table sorts on its own
            assert app.query_one("#programs-table", SortableTable).sort_label == "BYTES"
            assert table.sort_label == "MFU"

    asyncio.run(scenario())


def test_pilot_programs_view_shows_the_first_rows_of_a_large_catalogue() -> None:
    """Past MAX_PROGRAM_ROWS the programs view shows the first rows in its sort order (the
    costliest by FLOPs), says how many of how many, and re-sorting picks them again."""
    rows = MAX_PROGRAM_ROWS
    big = snapshot(1, jobs=(job("alpha", 101, programs=rows + 50),))

    async def scenario() -> None:
        async with top(big, size=(160, 36)) as (app, pilot, _):
            await pilot.press("p")
            await until(pilot, lambda: len(order(app, "#programs-table")) == rows)
            # by FLOPs descending: the last 500 programs of the job (flops grow with the index)
            assert order(app, "#programs-table")[0] == f"101:alpha-fp{rows + 49}"
            assert order(app, "#programs-table")[-1] == "101:alpha-fp50"
            await sees(pilot, app, f"Programs (the first {rows} of {rows + 50:,})")
            await pilot.press("r")  # ascending: the cheapest 500 instead
            await until(pilot, lambda: order(app, "#programs-table")[0] == "101:alpha-fp0")
            assert len(order(app, "#programs-table")) == rows

    asyncio.run(scenario())


def test_pilot_job_tabs_with_numbers_and_a_d() -> None:
    async def scenario() -> None:
        async with top(three_jobs()) as (app, pilot, _):
            await pilot.press("3")
            assert app.tab_pid == 102 and order(app) == ["102"]
            await sees(pilot, app, ">beta:102<")
            await pilot.press("d")
            assert app.tab_pid == 103
            await pilot.press("d")  # wraps to "all"
            assert app.tab_pid is None and len(order(app)) == 3
            await pilot.press("a")
            assert app.tab_pid == 103
            await pilot.press("9")  # no such tab: nothing changes
            assert app.tab_pid == 103
            await pilot.press("1")
            assert app.tab_pid is None

    asyncio.run(scenario())


def test_pilot_capture_key_sends_the_request_for_the_selected_job() -> None:
    requested: list[int] = []

    def capture(pid: int) -> str:
        requested.append(pid)
        return f"trace of pid {pid} captured"

    async def scenario() -> None:
        async with top(three_jobs(), capture=capture) as (app, pilot, _):
            await pilot.press("t")  # "all" tab: the highlighted row (first = largest memory)
            await until(pilot, lambda: requested == [101] and app.capturing is None)
            await pilot.press("down", "t")
            await until(pilot, lambda: requested == [101, 103] and app.capturing is None)
            await pilot.press("3", "t")  # a job tab selects its job
            await until(pilot, lambda: requested == [101, 103, 102])
            await until(pilot, lambda: "trace of pid 102 captured" in screen_text(app))

    asyncio.run(scenario())


def test_pilot_capture_shows_its_progress_until_answered() -> None:
    answer = threading.Event()

    def capture(pid: int) -> str:
        answer.wait(30)
        return f"trace of pid {pid} captured"

    async def scenario() -> None:
        async with top(three_jobs(), capture=capture) as (app, pilot, _):
            await pilot.press("t")
            await until(pilot, lambda: "pid 101: tracing … 0 s of 3 s" in screen_text(app))
            await pilot.press("t")  # one capture at a time
            await until(pilot, lambda: "a trace of pid 101 is in progress" in screen_text(app))
            app.capturing = (101, time.monotonic() - 4.0)  # past the trace: now writing it
            await until(pilot, lambda: "pid 101: writing the trace" in screen_text(app))
            answer.set()
            await until(pilot, lambda: "trace of pid 101 captured" in screen_text(app))
            assert "pid 101: writing" not in screen_text(app) and app.capturing is None

    asyncio.run(scenario())


def test_pilot_capture_failures_are_messages() -> None:
    def failing(pid: int) -> str:
        raise RuntimeError(f"job {pid} is not answering")

    async def scenario() -> None:
        async with top(three_jobs(), capture=failing) as (app, pilot, _):
            await pilot.press("t")
            await until(pilot, lambda: "job 101 is not answering" in screen_text(app))
        async with top(three_jobs()) as (app, pilot, _):  # no capture call at all
            await pilot.press("t")
            await until(pilot, lambda: CAPTURE_UNAVAILABLE in screen_text(app))
        async with top(snapshot(1), capture=failing) as (app, pilot, _):  # no job to capture
            await pilot.press("t")
            await until(pilot, lambda: "select a job first" in screen_text(app))

    asyncio.run(scenario())


def test_pilot_hardware_only_at_80x24() -> None:
    devices = tuple(tpu_device(i) for i in range(4))

    async def scenario() -> None:
        async with top(snapshot(1, devices=devices), size=(80, 24)) as (app, pilot, _):
            await sees(pilot, app, "tpu 3")
            text = screen_text(app)
            for i in range(4):
                assert f"tpu {i}" in text
            assert "0 jobs" in text and "150W" in text and "55°C" in text
            assert "Jobs (0)" in text
            for key in "mpcho":
                await pilot.press(key)  # every view draws with no job
            assert app.is_running

    asyncio.run(scenario())


def test_pilot_no_devices_and_no_jobs_says_what_to_do() -> None:
    async def scenario() -> None:
        async with top(snapshot(1), size=(80, 24)) as (app, pilot, _):
            await until(pilot, lambda: NO_DEVICES[:40] in screen_text(app).replace("\n", " "))

    asyncio.run(scenario())


def test_pilot_every_view_fits_80x24_with_jobs_and_devices() -> None:
    busy = dataclasses.replace(three_jobs(), devices=(tpu_device(0, (101,)), tpu_device(1, (101,))))

    async def scenario() -> None:
        async with top(busy, size=(80, 24)) as (app, pilot, _):
            seen = {}
            marks = {
                "o": "Jobs (3)",
                "m": "SCOPE",
                "p": "PROGRAM",
                "c": "COMPILES",
                "h": "host CPU",
                "f": "No findings",
            }
            for key, mark in marks.items():
                await pilot.press(key)
                await sees(pilot, app, mark)
                seen[key] = screen_text(app)
            assert "alpha" in seen["o"] and "tpu 0" in seen["o"]
            assert "host (all processes)" in seen["m"]
            assert "PROGRAM" in seen["p"] and "COMPILES" in seen["c"]
            assert "host CPU" in seen["h"]
            assert all(len(text.splitlines()) <= 24 for text in seen.values())
            assert all(max(map(len, t.splitlines())) <= 80 for t in seen.values())

    asyncio.run(scenario())


def test_pilot_daemon_away_and_back() -> None:
    async def scenario() -> None:
        async with top(FeedStatus(True, "connected to /run/x.sock"), three_jobs(1)) as (
            app, pilot, feed,
        ):  # fmt: skip
            feed.put(FeedStatus(False, "daemon not reachable at /run/x.sock, retrying"))
            await until(pilot, lambda: "daemon not reachable at /run/x.sock" in screen_text(app))
            assert "alpha" in screen_text(app)  # the last data stays on screen
            feed.put(FeedStatus(True, "connected to /run/x.sock"))
            await show(pilot, app, feed, three_jobs(2))
            await until(pilot, lambda: "not reachable" not in screen_text(app))

    asyncio.run(scenario())


def test_pilot_never_connected_shows_the_state() -> None:
    async def scenario() -> None:
        status = FeedStatus(False, "daemon not reachable at /nowhere.sock, retrying")
        async with top(status, size=(80, 24)) as (app, pilot, _):
            await until(pilot, lambda: "not reachable at /nowhere.sock" in screen_text(app))
            assert app.snapshot is None

    asyncio.run(scenario())


def test_pilot_pause_freezes_the_view() -> None:
    async def scenario() -> None:
        async with top(three_jobs(1)) as (app, pilot, feed):
            await pilot.press("z")
            await sees(pilot, app, "PAUSED")
            feed.put(three_jobs(2))
            await until(pilot, lambda: app.pending is not None)
            await pilot.pause(0.2)
            assert app.snapshot is not None and app.snapshot.seq == 1
            await pilot.press("z")
            assert app.snapshot.seq == 2
            await until(pilot, lambda: "PAUSED" not in screen_text(app))

    asyncio.run(scenario())


def test_pilot_memory_tree_expands_and_keeps_choices() -> None:
    async def scenario() -> None:
        async with top(three_jobs(1)) as (app, pilot, feed):
            await pilot.press("m")
            tree = app.query_one(MemoryTree)
            programs = tree.nodes_by_key["job:101:programs"]
            assert not programs.is_expanded and tree.nodes_by_key["job:101"].is_expanded
            await pilot.press("x")
            assert all(n.is_expanded for n in tree.nodes_by_key.values() if n.allow_expand)
            await show(pilot, app, feed, three_jobs(2))  # same structure: state survives
            assert tree.nodes_by_key["job:101:programs"].is_expanded
            await pilot.press("x")
            assert not tree.nodes_by_key["job:101"].is_expanded

    asyncio.run(scenario())


def test_pilot_help_opens_and_closes() -> None:
    async def scenario() -> None:
        async with top(three_jobs()) as (app, pilot, _):
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await sees(pilot, app, "capture a profiler trace")
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("q")
        assert not app.is_running

    asyncio.run(scenario())


def test_pilot_a_failing_source_is_a_message_not_a_traceback() -> None:
    def broken() -> Iterator[FeedEvent]:
        yield three_jobs(1)
        raise OSError("socket exploded")

    async def scenario() -> None:
        app = XmonTop(broken(), refresh_seconds=0.05)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: "snapshot feed failed: socket exploded" in screen_text(app))
            assert app.snapshot is not None

    asyncio.run(scenario())


def test_pilot_job_that_goes_away_returns_to_all() -> None:
    async def scenario() -> None:
        async with top(three_jobs(1)) as (app, pilot, feed):
            await pilot.press("2")
            assert app.tab_pid == 101
            await show(pilot, app, feed, snapshot(2, jobs=three_jobs().jobs[1:]))
            assert app.tab_pid is None and order(app) == ["103", "102"]

    asyncio.run(scenario())


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_pilot_history_draws_sparklines(size: tuple[int, int]) -> None:
    async def scenario() -> None:
        async with top(three_jobs(1), size=size) as (app, pilot, feed):
            for seq in range(2, 6):
                await show(pilot, app, feed, three_jobs(seq))
            await pilot.press("h")
            await sees(pilot, app, "alpha (101) steps/s")
            assert "█" in screen_text(app)

    asyncio.run(scenario())


def marked_jobs() -> Snapshot:
    """One job with declared model FLOPs; one without, stepping by inference, FLOPs a bound."""
    jobs = (
        job("alpha", 101, devices=2, mfu=0.2, hfu=0.31, busy=0.9),
        job("beta", 102, devices=1, mfu=None, hfu=0.45, busy=0.12, inferred=True,
            lower_bound=True),
    )  # fmt: skip
    devices = (tpu_device(0, (101,)), tpu_device(1, (101,)))
    return dataclasses.replace(snapshot(1, jobs=jobs), devices=devices)


@pytest.mark.parametrize("size", [(80, 24), (120, 36)])
def test_pilot_hfu_mfu_busy_and_marks_fit(size: tuple[int, int]) -> None:
    async def scenario() -> None:
        async with top(marked_jobs(), size=size) as (app, pilot, _):
            await sees(pilot, app, "Jobs (2)")
            text = screen_text(app)
            lines = text.splitlines()
            assert len(lines) <= size[1] and max(map(len, lines)) <= size[0]
            header = next(line for line in lines if line.lstrip().startswith("PID"))
            for column in ("MFU", "HFU", "BUSY", "STEPS"):  # all fit, even at 80 columns
                assert column in header
            rows = {
                line.split()[0]: line for line in lines if line.split()[:1] in (["101"], ["102"])
            }
            beta, alpha = rows["102"], rows["101"]
            assert "—" in beta and "≥45.0%" in beta and "~" in beta and "12%" in beta
            assert "20.0%" in alpha and "31.0%" in alpha and "~" not in alpha
            assert "BUSY" in lines[4] and "90%" in lines[5]  # the device panel
            assert "~ inferred · ≥ lower bound · MFU — undeclared" in text

    asyncio.run(scenario())


def test_pilot_help_explains_mfu_and_the_marks() -> None:
    async def scenario() -> None:
        async with top(marked_jobs(), size=(80, 24)) as (app, pilot, _):
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            await sees(pilot, app, "none declared")
            text = screen_text(app)
            assert "declare_model_flops" in text and "host-bound" in text
            assert "~     steps inferred" in text and "≥     lower bound" in text

    asyncio.run(scenario())
