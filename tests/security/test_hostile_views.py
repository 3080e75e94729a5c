"""What the views (`xmon top`, `xmon doctor`) make of hostile text in a finding: rich markup,
terminal escapes, a megabyte. Each is shown as text, cut to what a terminal shows, and the
view keeps running."""

from __future__ import annotations

import asyncio
import dataclasses

from test_top_app import screen_text, sees, top, until

from xmon.cli import doctor
from xmon.model import Finding, Snapshot
from xmon.top.app import XmonTop

from views_support import job, snapshot

MARKUP = "[/bold] [link=https://evil.example]x[/link] [red]"  # an unmatched closing tag
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
MEGABYTE = "A" * (1 << 20)


def _hostile(seq: int = 1) -> Snapshot:
    finding = Finding(
        "stall", "warning", f"summary {MARKUP} {ESCAPES}", 1_700_000_000.0,
        evidence=((f"name {MARKUP}", f"value {MARKUP} {ESCAPES}"), ("big", MEGABYTE)),
        fix=f"fix {MARKUP}", value=1.0, detail=f"line {MARKUP}\n{MEGABYTE}",
    )  # fmt: skip
    jobs = (dataclasses.replace(job("alpha", 101, devices=1), findings=(finding,)),)
    return dataclasses.replace(snapshot(seq, jobs=jobs), findings=(finding,))


def test_top_shows_markup_and_escapes_in_a_finding_as_text() -> None:
    """The findings view of the real TUI (textual's pilot): rich read an evidence value as
    markup and raised MarkupError, which ended ``xmon top``."""

    async def scenario() -> None:
        async with top(_hostile(), size=(120, 40)) as (app, pilot, _):
            await pilot.press("f")
            await until(pilot, lambda: app.view == "findings")
            await sees(pilot, app, "value [/bold] [link=https://evil.example]x[/link]")
            text = screen_text(app)
            assert "\x1b" not in text and "\\x1b]0;pwned" in text
            assert app.is_running and isinstance(app, XmonTop)

    asyncio.run(scenario())


def test_doctor_cuts_a_megabyte_finding_to_a_screenful() -> None:
    text = doctor.render(list(_hostile().jobs), show_info=True)
    assert len(text) < 20_000, len(text)
    assert "more characters)" in text and MARKUP in text
