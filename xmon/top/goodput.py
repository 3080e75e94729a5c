"""Goodput in ``xmon top``: per job, a bar of where its wall time went (each bucket its own
colour), its goodput and the biggest badput named; the jobs table's GOOD and LOST TO columns.
Pure functions of the model."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from xmon.model import GOODPUT_BUCKETS, Job
from xmon.top import fmt

MAX_BARS = 8  # jobs with a bar under the devices; the table has every job's numbers
BAR_WIDTH = 40

# (glyph, style) per bucket: productive solid green, the device waiting hatched, then badput.
STYLES: dict[str, tuple[str, str]] = {
    "productive": ("█", "green"),
    "host_wait": ("▓", "yellow"),
    "steps_unmeasured": ("▒", "grey50"),
    "startup": ("░", "blue"),
    "compile": ("█", "magenta"),
    "checkpoint_save": ("█", "cyan"),
    "checkpoint_restore": ("▓", "cyan"),
    "stall": ("█", "red"),
    "idle": ("░", "grey50"),
    "unattributed": ("·", "grey50"),
}
assert set(STYLES) == set(GOODPUT_BUCKETS)


def goodput_ratio(job: Job) -> float | None:
    return job.goodput.ratio if job.goodput is not None else None


def lost_share(job: Job) -> float | None:
    """The biggest badput bucket's share of the wall time (None without an account)."""
    goodput = job.goodput
    if goodput is None or goodput.biggest_badput is None or goodput.wall_seconds <= 0:
        return None
    return goodput.bucket(goodput.biggest_badput) / goodput.wall_seconds


def lost_to(job: Job) -> str:
    """The biggest badput bucket and its share of the wall time: ``compile 18%``."""
    share = lost_share(job)
    if share is None or job.goodput is None:
        return fmt.NA_TEXT
    return f"{job.goodput.biggest_badput} {fmt.percent(share)}"


def bar(seconds: Sequence[tuple[str, float]], width: int = BAR_WIDTH) -> Text:
    """A stacked bar ``width`` cells wide: each bucket's cells in proportion to its seconds
    (largest remainders, so the cells always add up), drawn in its glyph and colour."""
    total = sum(max(0.0, s) for _, s in seconds)
    text = Text(no_wrap=True)
    if total <= 0:
        return text.append(" " * width)
    exact = [(name, max(0.0, s) / total * width) for name, s in seconds]
    cells = {name: int(share) for name, share in exact}
    left = width - sum(cells.values())
    for name, _ in sorted(exact, key=lambda e: e[1] - int(e[1]), reverse=True)[:left]:
        cells[name] += 1
    for name, _ in seconds:
        glyph, style = STYLES.get(name, ("?", ""))
        text.append(glyph * cells[name], style)
    return text


def goodput_panel(jobs: Sequence[Job]) -> RenderableType | None:
    """One line per job with an account: name, wall time, goodput, bar, the largest badput
    buckets. None when no job in scope sends one."""
    shown = [j for j in jobs if j.goodput is not None][:MAX_BARS]
    if not shown:
        return None
    table = Table(expand=True, box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("WALL TIME OF", no_wrap=True, max_width=20, overflow="ellipsis")
    table.add_column("WALL", justify="right", no_wrap=True)
    table.add_column("GOOD", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, width=BAR_WIDTH)
    table.add_column("LOST TO", no_wrap=True, ratio=1, overflow="ellipsis")
    for job in shown:
        goodput = job.goodput
        assert goodput is not None
        table.add_row(
            f"{job.job_name}:{job.pid}",
            fmt.seconds(goodput.wall_seconds),
            fmt.percent(goodput.ratio),
            bar(goodput.seconds),
            _badput(goodput.seconds, goodput.wall_seconds),
        )
    return table


def _badput(seconds: Sequence[tuple[str, float]], wall: float, most: int = 3) -> Text:
    """The largest badput buckets with their shares, each in its bar's colour."""
    lost = sorted(((s, n) for n, s in seconds if n != "productive" and s > 0), reverse=True)
    text = Text(no_wrap=True)
    for k, (value, name) in enumerate(lost[:most]):
        if k:
            text.append(" · ")
        text.append(f"{name} {fmt.percent(value / wall if wall > 0 else None)}",
                    STYLES.get(name, ("", ""))[1])  # fmt: skip
    return text
