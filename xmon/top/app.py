"""``xmon top``: a textual app laid out after neuron-top and nvitop.

Title bar with host summary; views (overview: device panel + jobs table; memory summary and
tree; programs; compiles; history sparklines; findings with evidence and fix); a tab per job at
the bottom. Snapshots come from any iterable (:mod:`xmon.top.feed`), so tests drive the app
with constructed snapshots.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.timer import Timer
from textual.widgets import Static, TabbedContent

from xmon.model import Snapshot
from xmon.top import layout, panels
from xmon.top.feed import DaemonSource, FeedEvent, FeedStatus, FeedThread
from xmon.top.findings import findings_panel, title_note
from xmon.top.goodput import goodput_panel
from xmon.top.help import CAPTURE_UNAVAILABLE, CaptureUnavailable, HelpScreen, daemon_capture
from xmon.top.history import History
from xmon.top.layout import SORTED_TABLE, VIEWS
from xmon.top.memory import MemoryTree, memory_summary
from xmon.top.once import matching_jobs
from xmon.top.tables import SortableTable, compile_items, program_items
from xmon.top.viewmodel import device_rows, jobs_in_scope
from xmon.views.capture import progress_line
from xmon.views.safe_text import printable

Capture = Callable[[int], str]


class FeedMessage(Message):
    def __init__(self, event: FeedEvent) -> None:
        super().__init__()
        self.event = event


class XmonTop(App[None]):
    TITLE = "xmon top"
    ENABLE_COMMAND_PALETTE = False  # every action has a key; see the help screen (?)
    CSS = layout.CSS
    BINDINGS = layout.BINDINGS

    def __init__(
        self,
        source: Iterable[FeedEvent],
        capture: Capture | None = None,
        refresh_seconds: float = 1.0,
        capture_seconds: float = 3.0,
        job: str | None = None,
    ) -> None:
        super().__init__()
        self.wanted_job = job  # --job: its tab is chosen once a snapshot holds it
        self.animation_level = "none"  # a monitor over SSH: repaint what changed, nothing more
        self.feed = FeedThread(source, self.post_message_from_feed)
        self.capture_call = capture
        self.capture_seconds = capture_seconds
        self.capturing: tuple[int, float] | None = None  # (pid, monotonic start) of the t key
        self.refresh_seconds = refresh_seconds
        self.snapshot: Snapshot | None = None
        self.pending: Snapshot | None = None
        self.status = FeedStatus(False, "waiting for the first snapshot")
        self.paused = False
        self.tab_pid: int | None = None  # None: the "all" tab
        self.history = History()

    def post_message_from_feed(self, event: FeedEvent) -> bool:
        return self.post_message(FeedMessage(event))

    def compose(self) -> ComposeResult:
        yield from layout.compose()

    def on_mount(self) -> None:
        self.render_all()
        self._focus_view()
        self.call_after_refresh(self.feed.start)  # the first frame before grpc's import
        self.set_interval(self.refresh_seconds, self._tick)

    def on_unmount(self) -> None:
        self.feed.stop()

    # --- data in -----------------------------------------------------------------------------

    def on_feed_message(self, message: FeedMessage) -> None:
        event = message.event
        if isinstance(event, FeedStatus):
            self.status = event
            self._render_title()
            return
        self.pending = event
        if not self.status.connected:  # a snapshot arrived: whatever the source, it is live
            self.status = FeedStatus(True, "receiving snapshots")
        if self.snapshot is None and not self.paused:  # draw the first one at once
            self._apply()

    def _tick(self) -> None:
        if self.pending is not None and not self.paused:
            self._apply()

    def _apply(self) -> None:
        snapshot, self.pending = self.pending, None
        if snapshot is None:
            return
        self.snapshot = snapshot
        self.history.add(snapshot)
        if self.wanted_job is not None:
            found = matching_jobs(snapshot, self.wanted_job)
            if found:
                self.tab_pid, self.wanted_job = found[0].pid, None
        if self.tab_pid is not None and all(j.pid != self.tab_pid for j in snapshot.jobs):
            self.tab_pid = None  # the job went away: back to "all"
        self.render_all()

    # --- drawing -----------------------------------------------------------------------------

    @property
    def view(self) -> str:
        return self.query_one("#views", TabbedContent).active

    def render_all(self) -> None:
        self._render_title()
        jobs = self.snapshot.jobs if self.snapshot is not None else ()
        self.query_one("#tabs", Static).update(panels.job_tabs(jobs, self.tab_pid))
        self._render_view()

    def _render_title(self) -> None:
        count = len(device_rows(self.snapshot)) if self.snapshot is not None else 0
        note = title_note(self.snapshot) if self.snapshot is not None else None
        title = panels.title_bar(
            self.snapshot, self.status, self.paused, count, self.capture_progress(), note
        )
        self.query_one("#title", Static).update(title)

    def _render_view(self) -> None:
        snapshot, view = self.snapshot, self.view
        if snapshot is None:
            # Text, not markup: the message may quote a daemon's or the OS's error text.
            self.query_one("#devices", Static).update(Text(f"{self.status.message} …"))
            return
        jobs = jobs_in_scope(snapshot, self.tab_pid)
        if view == "overview":
            devices = panels.device_panel(device_rows(snapshot, self.tab_pid))
            goodput = goodput_panel(jobs)
            self.query_one("#devices", Static).update(
                devices if goodput is None else Group(devices, Text(""), goodput)
            )
            self._show_table("#jobs", jobs, "Jobs", panels.job_legend(jobs))
        elif view == "memory":
            self.query_one("#memory-summary", Static).update(memory_summary(snapshot.host, jobs))
            self.query_one(MemoryTree).show(jobs)
        elif view == "programs":
            self._show_table("#programs-table", program_items(jobs), "Programs")
        elif view == "compiles":
            self.query_one("#compile-summary", Static).update(panels.compile_summary(jobs))
            self._show_table("#compiles-table", compile_items(jobs), "Recent compiles")
        elif view == "history":
            self._render_history()
        elif view == "findings":
            self.query_one("#findings-panel", Static).update(findings_panel(snapshot, jobs))

    def _show_table(
        self, selector: str, items: Sequence[object], title: str, legend: str = ""
    ) -> None:
        table = self.query_one(selector, SortableTable)
        table.show(items)
        label_id = {"#jobs": "#jobs-label", "#programs-table": "#programs-label"}.get(
            selector, "#compiles-label"
        )
        shown = len(table.keys)
        count = f"{len(items)}" if shown == len(items) else f"the first {shown:,} of {len(items):,}"
        heading, width = f"{title} ({count})", self.size.width
        label = panels.table_label(heading, table.sort_label, table.reverse, legend, width)
        self.query_one(label_id, Static).update(label)

    def _render_history(self) -> None:
        snapshot, pid = self.snapshot, self.tab_pid
        keys = {r.key for r in device_rows(snapshot, pid)} if snapshot and pid else set()

        def wanted(key: str) -> bool:
            if pid is None or key.startswith("host:") or key.startswith(f"job:{pid}:"):
                return True
            return any(key.startswith(k + ":") for k in keys)

        panel = panels.history_panel(self.history, self.size.width, wanted)
        self.query_one("#history-panel", Static).update(panel)

    @on(TabbedContent.TabActivated)
    def _view_changed(self) -> None:
        self._render_view()
        self._focus_view()

    def _focus_view(self) -> None:
        """Arrow keys go to the view's table or tree, not to the view tabs."""
        focus = {**SORTED_TABLE, "memory": "#memory-tree", "findings": "#findings-scroll"}.get(
            self.view
        )
        if focus is not None:
            self.query_one(focus).focus()

    # --- actions -----------------------------------------------------------------------------

    def action_show_view(self, view: str) -> None:
        self.query_one("#views", TabbedContent).active = view

    def action_cycle_view(self, step: int) -> None:
        index = (VIEWS.index(self.view) + step) % len(VIEWS)
        self.action_show_view(VIEWS[index])

    def _tab_pids(self) -> list[int | None]:
        return [None, *(j.pid for j in (self.snapshot.jobs if self.snapshot else ()))]

    def action_job_tab(self, number: int) -> None:
        pids = self._tab_pids()
        if number <= len(pids):
            self.tab_pid = pids[number - 1]
            self.render_all()

    def action_step_tab(self, step: int) -> None:
        pids = self._tab_pids()
        index = pids.index(self.tab_pid) if self.tab_pid in pids else 0
        self.tab_pid = pids[(index + step) % len(pids)]
        self.render_all()

    def action_sort(self) -> None:
        table = self._sorted_table()
        if table is not None:
            table.cycle_sort()
            self._render_view()

    def action_reverse(self) -> None:
        table = self._sorted_table()
        if table is not None:
            table.toggle_reverse()
            self._render_view()

    def _sorted_table(self) -> SortableTable | None:
        selector = SORTED_TABLE.get(self.view)
        if selector is None:
            self.notify("nothing to sort in this view", timeout=2)
            return None
        return self.query_one(selector, SortableTable)

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self.pending is not None:
            self._apply()
        self._render_title()

    def action_toggle_tree(self) -> None:
        self.query_one(MemoryTree).toggle_all()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def selected_pid(self) -> int | None:
        """The job a capture is for: the job tab, else the highlighted job row, else the only
        job."""
        if self.tab_pid is not None:
            return self.tab_pid
        jobs = self.snapshot.jobs if self.snapshot else ()
        key = self.query_one("#jobs", SortableTable).selected_key
        if key is not None and any(str(j.pid) == key for j in jobs):
            return int(key)
        return jobs[0].pid if len(jobs) == 1 else None

    def action_capture(self) -> None:
        pid = self.selected_pid()
        if pid is None:
            self.notify("select a job first (job tab or jobs table)", severity="warning")
            return
        if self.capture_call is None:
            self.notify(CAPTURE_UNAVAILABLE, severity="warning")
            return
        if self.capturing is not None:
            self.notify(f"a trace of pid {self.capturing[0]} is in progress", timeout=3)
            return
        self.capturing = (pid, time.monotonic())
        progress = self.set_interval(0.5, self._render_title)
        self._render_title()
        self.run_worker(lambda: self._capture(pid, progress), thread=True, exit_on_error=False)

    def capture_progress(self) -> str | None:
        """What the capture the t key asked for is doing, and why it waits."""
        if self.capturing is None:
            return None
        pid, started = self.capturing
        return f"pid {pid}: " + progress_line(time.monotonic() - started, self.capture_seconds)

    def _capture_done(self, progress: Timer, message: str, severity: SeverityLevel) -> None:
        progress.stop()
        self.capturing = None
        self._render_title()
        # The answer quotes the job (its name, paths): shown as text, escapes made visible.
        self.notify(printable(message, keep="\n"), severity=severity, timeout=15, markup=False)

    def _capture(self, pid: int, progress: Timer) -> None:
        assert self.capture_call is not None
        severity: SeverityLevel
        try:
            message, severity = self.capture_call(pid), "information"
        except CaptureUnavailable as exc:
            message, severity = str(exc), "warning"
        except Exception as exc:  # noqa: BLE001 - any failure is a message, never a traceback
            message, severity = str(exc) or type(exc).__name__, "error"
        self.call_from_thread(self._capture_done, progress, message, severity)


def run_top(
    socket_path: Path | None,
    refresh_seconds: float,
    trace_seconds: float = 3.0,
    job: str | None = None,
) -> int:
    source = DaemonSource(socket_path)
    capture = daemon_capture(socket_path, trace_seconds)
    XmonTop(source, capture, refresh_seconds, capture_seconds=trace_seconds, job=job).run()
    return 0
