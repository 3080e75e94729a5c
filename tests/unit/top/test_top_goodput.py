"""Goodput in xmon top (xmon.top.goodput): the stacked bar, the LOST TO column, and the
overview's panel in a real app driven by its pilot."""

from __future__ import annotations

import asyncio
import dataclasses

from xmon.model import GOODPUT_BUCKETS, Goodput
from xmon.top.goodput import STYLES, bar, lost_to

from support.top_app import screen_text, sees, top
from support.views import job, snapshot

ACCOUNT = Goodput(1200.0, (("productive", 600.0), ("host_wait", 180.0), ("compile", 300.0),
                           ("startup", 120.0)), 0.5, 0.6, None, "compile")  # fmt: skip


def test_the_bar_gives_each_bucket_its_share_of_the_cells() -> None:
    text = bar(ACCOUNT.seconds, width=40)
    assert text.plain == "█" * 20 + "▓" * 6 + "█" * 10 + "░" * 4
    # thin buckets still add up to the width (largest remainders)
    thin = bar((("productive", 1.0), ("compile", 1.0), ("stall", 1.0)), width=10)
    assert len(thin.plain) == 10
    assert bar((), width=5).plain == "     "
    assert set(STYLES) == set(GOODPUT_BUCKETS)


def test_lost_to_names_the_biggest_badput_with_its_share() -> None:
    assert lost_to(dataclasses.replace(job(), goodput=ACCOUNT)) == "compile 25%"
    assert lost_to(job()) == "n/a"


def test_pilot_overview_shows_each_job_s_wall_time() -> None:
    jobs = (dataclasses.replace(job("train", 101), goodput=ACCOUNT), job("eval", 102))

    async def scenario() -> None:
        async with top(snapshot(1, jobs=jobs), size=(160, 40)) as (app, pilot, _):
            await sees(pilot, app, "WALL TIME OF")
            text = screen_text(app)
            line = next(ln for ln in text.splitlines() if "train:101" in ln and "█" in ln)
            assert "20m00s" in line and "50%" in line
            assert "compile 25% · host_wait 15% · startup 10%" in line
            assert "eval:102" not in [ln.split()[0] for ln in text.splitlines() if "█" in ln]
            assert "LOST TO" in text and "compile 25%" in text

    asyncio.run(scenario())
