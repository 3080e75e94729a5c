"""The help screen of ``xmon top`` (``?``), and the capture wiring to the daemon."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from xmon.top import fmt

CAPTURE_UNAVAILABLE = "capture is not available from this daemon"

KEYS = (
    ("q", "quit"),
    ("o m p c h f", "overview, memory, programs, compiles, history, findings"),
    ("v / V", "next / previous view"),
    ("1-9", "job tab: 1 = all jobs, 2.. = one job each"),
    ("a / d", "previous / next job tab"),
    ("s / r", "sort the table by the next column / reverse the order"),
    ("z or space", "pause / resume updates"),
    ("t", "capture a profiler trace of the selected job"),
    ("x", "memory view: expand / collapse all"),
    ("arrows", "move in tables and the memory tree; scroll the findings"),
    ("?", "this help (esc closes)"),
)

# What the overview's columns and marks mean; each line fits the 76-column help box.
LEGEND = (
    ("HFU", "FLOPs XLA counts as run (loops per trip, remat too) / peak"),
    ("MFU", f"declared model FLOPs / peak (PaLM); {fmt.UNDECLARED_TEXT} none declared:"),
    ("", "declare them: xmon.declare_model_flops(...), xmon.step(flops=)"),
    ("BUSY", "device time running the job's programs; low: host-bound"),
    ("GOOD", "goodput: stepping with the devices busy, of the wall time"),
    ("LOST", "LOST TO: where most of the rest went (bars under the devices)"),
    (fmt.INFERRED_MARK, "steps inferred from the dominant program (no xmon.step)"),
    (fmt.LOWER_BOUND_MARK, "lower bound: a loop's trip count is unknown to XLA"),
    (fmt.UPPER_BOUND_MARK, "upper bound: XLA counts a conditional's costliest branch"),
    (fmt.EITHER_BOUND_MARK, "both at once: neither bound holds"),
    ("! ‼ i", "a job's worst finding: warning, error, info (f shows them)"),
    ("peak", "memory view: XLA's estimate of a program's live buffers; below"),
    ("", "temp it leaves temp out: args + out + temp is what it can hold"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss_help", "close", show=False),
        # The help is taller than an 80x24 terminal: the keys a pager has scroll it.
        Binding("down,j", "scroll(1)", show=False),
        Binding("up,k", "scroll(-1)", show=False),
        Binding("pagedown,space", "scroll(10)", show=False),
        Binding("pageup", "scroll(-10)", show=False),
        Binding("end,G", "scroll(1000)", show=False),
        Binding("home,g", "scroll(-1000)", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
        scrollbar-size-vertical: 1;
    }
    """

    def compose(self) -> ComposeResult:
        lines = [f"[b]{key:<11}[/b] {text}" for key, text in KEYS]
        legend = [f"[b]{mark:<5}[/b] {text}" for mark, text in LEGEND]
        title = "[b]xmon top[/b] keys (arrows and page keys scroll this help)"
        text = "\n".join([title, "", *lines, "", *legend])
        with VerticalScroll():
            yield Static(text)

    def action_scroll(self, lines: int) -> None:
        self.query_one(VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)


class CaptureUnavailable(RuntimeError):
    """The daemon offers no capture call (yet); the message is what the user sees."""


def daemon_capture(socket_path: Path | None, seconds: float = 3.0) -> Callable[[int], str]:
    """A ``capture(pid) -> str`` that asks the daemon for a ``seconds`` long trace of the job
    ``pid`` and says where it was written.

    ``DaemonClient.capture`` is looked up when the key is pressed, so a client without the call
    gives a clear message instead of failing at start-up.
    """

    def capture(pid: int) -> str:
        from xmon.wire.client import DaemonClient

        method = getattr(DaemonClient, "capture", None)
        if not callable(method):
            raise CaptureUnavailable(CAPTURE_UNAVAILABLE)
        with DaemonClient(socket_path) as client:
            reply = method(client, job_pid=pid, duration_s=seconds)
        return describe_capture(pid, reply)

    return capture


def describe_capture(pid: int, reply: object) -> str:
    """One line about a capture reply (CaptureReply's message and log_dir where present)."""
    logdir = getattr(reply, "log_dir", "") or getattr(reply, "run_dir", "")
    message = getattr(reply, "message", "") or ("" if logdir or reply is None else str(reply))
    details = [d for d in (message, f"tensorboard --logdir {logdir}" if logdir else "") if d]
    head = f"trace of pid {pid} " + ("captured" if logdir else "requested")
    return f"{head}: {'; '.join(details)}" if details else head
