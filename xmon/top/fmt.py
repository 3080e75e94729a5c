"""Number formatting and small renderables (bars, sparklines) for ``xmon top``.

Every formatter takes ``None`` (not available here) and prints ``NA_TEXT`` for it, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import Style
from rich.text import Text

from xmon.analysis import units

NA_TEXT = "n/a"
UNDECLARED_TEXT = "—"  # MFU of a job that declares no model FLOPs: undefined, not unknown
INFERRED_MARK = "~"  # step numbers inferred from the dominant repeated program (no markers)
LOWER_BOUND_MARK = units.LOWER_BOUND_MARK
UPPER_BOUND_MARK = units.UPPER_BOUND_MARK
EITHER_BOUND_MARK = units.EITHER_BOUND_MARK
bound_mark = units.bound_mark
_BLOCKS = " ▏▎▍▌▋▊▉█"
_SPARKS = "▁▂▃▄▅▆▇█"


def human_bytes(value: float | None) -> str:
    """IEC units, as ``xmon programs`` and ``xmon ls`` write them: ``1.5GiB``, ``512MiB``."""
    return NA_TEXT if value is None else units.iec_bytes(value)


def percent(ratio: float | None, digits: int = 0) -> str:
    return NA_TEXT if ratio is None else f"{ratio * 100:.{digits}f}%"


def seconds(value: float | None) -> str:
    """Step and compile times: ``850µs``, ``12.3ms``, ``1.25s``, ``3m05s``."""
    return NA_TEXT if value is None else units.duration(value)


def marked(text: str, mark: str, on: bool) -> str:
    """``text`` with a qualifying mark in front when ``on``; "n/a" is never marked."""
    return mark + text if on and text != NA_TEXT else text


def bounded(text: str, lower: bool, upper: bool) -> str:
    """``text`` with its bound mark in front (see :func:`bound_mark`); "n/a" is never marked."""
    mark = bound_mark(lower, upper)
    return marked(text, mark, bool(mark))


def rate(value: float | None) -> str:
    return NA_TEXT if value is None else f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def si(value: float | None, unit: str = "") -> str:
    """Decimal prefixes for counts and rates (FLOPs, FLOP/s, bytes/s): ``1.2T``, ``350G``."""
    return NA_TEXT if value is None else units.si(value, unit)


def watts(value: float | None) -> str:
    return NA_TEXT if value is None else f"{value:.0f}W"


def celsius(value: float | None) -> str:
    return NA_TEXT if value is None else f"{value:.0f}°C"


def sparkline(values: Sequence[float | None], width: int, top: float | None = None) -> str:
    """The last ``width`` values as block characters, scaled to ``top`` (default: their max);
    unknown points are blanks."""
    recent = list(values)[-width:] if width > 0 else []
    known = [v for v in recent if v is not None]
    scale = top if top is not None else (max(known) if known else 0.0)
    out = []
    for value in recent:
        if value is None:
            out.append(" ")
        elif scale <= 0:
            out.append(_SPARKS[0])
        else:
            index = round(min(1.0, max(0.0, value / scale)) * (len(_SPARKS) - 1))
            out.append(_SPARKS[index])
    return "".join(out).rjust(width)


def bar_cells(ratio: float, width: int) -> str:
    """A horizontal bar of ``width`` cells filled to ``ratio`` with eighth-cell resolution."""
    eighths = round(min(1.0, max(0.0, ratio)) * width * 8)
    full, part = divmod(eighths, 8)
    cells = "█" * full + (_BLOCKS[part] if part and full < width else "")
    return cells.ljust(width)


class Bar:
    """A bar that fills whatever width its table cell gets, with a label on the right and an
    optional peak marker (``│``) such as peak memory."""

    def __init__(
        self, ratio: float | None, label: str, peak: float | None = None, style: str = "green"
    ) -> None:
        self.ratio = ratio
        self.label = label
        self.peak = peak
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(len(self.label) + 4, options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width - len(self.label) - 1)
        yield self.text(width)

    def text(self, width: int) -> Text:
        if self.ratio is None:  # no limit known: a bar would be a guess
            return Text(f"{'·' * width} {self.label}", style="dim", no_wrap=True)
        cells = list(bar_cells(self.ratio, width))
        text = Text(no_wrap=True, overflow="crop")
        marker = _peak_cell(self.peak, width)
        for i, cell in enumerate(cells):
            if i == marker:
                text.append("│", Style(color="yellow", bold=True))
            else:
                text.append(cell if cell != " " else "·", self.style if cell != " " else "dim")
        text.append(f" {self.label}")
        return text


def _peak_cell(peak: float | None, width: int) -> int | None:
    if peak is None:
        return None
    return min(width - 1, max(0, round(min(1.0, peak) * width) - 1))


def bar_style(ratio: float | None) -> str:
    """Green below 70 %, yellow below 90 %, red above: nvitop's thresholds."""
    if ratio is None or ratio < 0.7:
        return "green"
    return "yellow" if ratio < 0.9 else "red"
