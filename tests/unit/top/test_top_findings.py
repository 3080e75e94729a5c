"""Findings in ``xmon top``: the marks on job rows and tabs, the host's note in the title bar,
and the findings view (``f``) with its scrollable thread stacks; first on constructed
snapshots, then against a real daemon and the pathology suite's job stalled in a lock."""

from __future__ import annotations

import asyncio
import dataclasses
import re

from textual.containers import VerticalScroll

from xmon.model import Finding, Snapshot
from xmon.top import fmt
from xmon.top.help import HelpScreen
from xmon.top.tables import SortableTable

from support.top_app import screen_text, sees, top, until
from support.views import job, snapshot

STACKS = "Thread MainThread (1):\n" + "".join(
    f'  File "/job/loader.py", line {n}, in frame_{n}\n' for n in range(1, 120)
)
STALL = Finding("stall", "warning", "no step has finished for 42 s (median step 50 ms)",
                1_700_000_160.0, evidence=(("seconds since last step", "42.0"),),
                fix="Read the main thread's stack below.", value=42.0,
                detail=STACKS)  # fmt: skip
PEAK = Finding("no_peak", "info", "no peak FLOP/s known for cpu", 1_700_000_100.0,
               fix="Configure it.")  # fmt: skip
HOST = Finding("tpu_metrics_unreachable", "warning", "no libtpu runtime metrics service answers",
               1_700_000_150.0, evidence=(("TPU chips", "4"),),
               fix="TPU_RUNTIME_METRICS_PORTS=8431", subject="tpu")  # fmt: skip


def with_findings(seq: int = 1) -> Snapshot:
    jobs = (
        dataclasses.replace(job("alpha", 101, devices=1), findings=(STALL, PEAK)),
        dataclasses.replace(job("beta", 102, devices=1), findings=(PEAK,)),
        job("gamma", 103, devices=1),
    )
    return dataclasses.replace(snapshot(seq, jobs=jobs), findings=(HOST,))


def row(text: str, pid: int) -> str:
    """The jobs table's row of ``pid``."""
    return next(line for line in text.splitlines() if line.strip().startswith(str(pid)))


def test_pilot_marks_rows_tabs_and_the_title() -> None:
    async def scenario() -> None:
        async with top(with_findings(), size=(120, 30)) as (app, pilot, _):
            await sees(pilot, app, "! 1 host finding (f)")
            text = screen_text(app)
            assert row(text, 101).split()[:3] == ["101", "alpha", "!"]
            assert row(text, 102).split()[:3] == ["102", "beta", "i"]
            assert row(text, 103).split()[:3] == ["103", "gamma", "1"]  # no mark: DEV next
            assert "!/i findings (f)" in text  # the legend above the table
            assert "alpha:101 !" in text and "beta:102 i" not in text  # tabs: warnings only
            table = app.query_one("#jobs", SortableTable)
            while table.sort_label != "!":
                await pilot.press("s")
            assert table.keys == ["101", "102", "103"]  # worst first, none last

    asyncio.run(scenario())


def test_pilot_findings_view_lists_evidence_fix_and_scrolls_the_stacks() -> None:
    async def scenario() -> None:
        async with top(with_findings(), size=(100, 30)) as (app, pilot, _):
            await pilot.press("f")
            await until(pilot, lambda: app.view == "findings")
            await sees(pilot, app, "stall: no step has finished for 42 s")
            text = screen_text(app)
            assert "host node0  1 finding" in text and "tpu_metrics_unreachable" in text
            assert "alpha:101  2 findings" in text and "WARNING" in text
            assert "seconds since last step  42.0" in text
            assert f"(for {fmt.seconds(41.0)})" in text  # the snapshot's time less its since
            assert "fix: Read the main thread's stack below." in text
            assert re.search(r"in frame_1\s*$", text, re.M) and "frame_119" not in text
            scroll = app.query_one("#findings-scroll", VerticalScroll)
            assert app.focused is scroll  # arrows and page keys scroll it
            await pilot.press("end")
            await sees(pilot, app, "frame_119")
            assert scroll.scroll_y > 100
            await pilot.press("home")
            await sees(pilot, app, "host node0")
            await pilot.press("3")  # beta's tab: its finding and the host's
            await sees(pilot, app, "beta:102  1 finding")
            text = screen_text(app)
            assert "alpha:101" not in text.split("1 all")[0] and "no_peak" in text
            await pilot.press("4")
            await sees(pilot, app, "gamma:103  no findings")

    asyncio.run(scenario())


def test_pilot_findings_view_without_findings_says_so() -> None:
    async def scenario() -> None:
        async with top(snapshot(1, jobs=(job("gamma", 103),)), size=(80, 24)) as (app, pilot, _):
            await pilot.press("f")
            await sees(pilot, app, "No findings: xmon sees nothing wrong here")
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            await sees(pilot, app, "compiles, history, findings")
            # Taller than 24 rows: the legend's end comes into view as the help scrolls.
            assert "what it can hold" not in screen_text(app)
            await pilot.press("end")
            await sees(pilot, app, "a job's worst finding: warning, error, info")
            await sees(pilot, app, "what it can hold")
            await pilot.press("home")
            await sees(pilot, app, "xmon top keys")

    asyncio.run(scenario())
