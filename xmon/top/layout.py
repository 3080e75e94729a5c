"""The screen of ``xmon top``: widget tree, styles and keys (the behaviour is in app.py).

title bar (2 lines: xmon, host, counts, connection; host vCPU and memory bars)
view tabs: Overview | Memory | Programs | Compiles | History | Findings
the view
job tabs (1 all, 2.. one per job)
footer with the main keys
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static, TabbedContent, TabPane

from xmon.top.memory import MemoryTree
from xmon.top.tables import compiles_table, jobs_table, programs_table

VIEWS = ("overview", "memory", "programs", "compiles", "history", "findings")
VIEW_KEYS = "ompchf"  # one key per view, in VIEWS order
SORTED_TABLE = {"overview": "#jobs", "programs": "#programs-table", "compiles": "#compiles-table"}

CSS = """
#title { height: 2; background: $boost; }
#views { height: 1fr; }
#tabs { height: 1; }
#devices { height: auto; max-height: 50%; }
#jobs-label, #programs-label, #compiles-label { height: 1; color: $text-muted; }
#jobs, #programs-table, #compiles-table { height: 1fr; }
#memory-summary, #compile-summary { height: auto; max-height: 40%; }
#memory-tree { height: 1fr; }
TabPane { padding: 0; }
"""

BINDINGS: list[BindingType] = [
    Binding("q", "quit", "quit"),
    Binding("question_mark", "help", "help"),
    Binding("v", "cycle_view(1)", "view"),
    Binding("V", "cycle_view(-1)", "view", show=False),
    *(
        Binding(k, f"show_view('{v}')", v, show=False)
        for k, v in zip(VIEW_KEYS, VIEWS, strict=True)
    ),
    *(Binding(str(n), f"job_tab({n})", f"tab {n}", show=False) for n in range(1, 10)),
    Binding("a", "step_tab(-1)", "prev tab", show=False),
    Binding("d", "step_tab(1)", "next tab", show=False),
    Binding("s", "sort", "sort"),
    Binding("r", "reverse", "reverse", show=False),
    Binding("z,space", "pause", "pause"),
    Binding("t", "capture", "trace"),
    Binding("x", "toggle_tree", "expand", show=False),
]


def compose() -> ComposeResult:
    yield Static(id="title")
    with TabbedContent(initial="overview", id="views"):
        with TabPane("Overview", id="overview"):
            yield Static(id="devices")
            yield Static("Jobs", id="jobs-label")
            yield jobs_table(id="jobs")
        with TabPane("Memory", id="memory"):
            yield Static(id="memory-summary")
            yield MemoryTree(id="memory-tree")
        with TabPane("Programs", id="programs"):
            yield Static(id="programs-label")
            yield programs_table(id="programs-table")
        with TabPane("Compiles", id="compiles"):
            yield Static(id="compile-summary")
            yield Static(id="compiles-label")
            yield compiles_table(id="compiles-table")
        with TabPane("History", id="history"):
            with VerticalScroll():
                yield Static(id="history-panel")
        with TabPane("Findings", id="findings"):
            with VerticalScroll(id="findings-scroll"):
                yield Static(id="findings-panel")
    yield Static(id="tabs")
    yield Footer()
