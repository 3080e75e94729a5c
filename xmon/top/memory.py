"""The memory view: neuron-top's "Memory Usage Summary" and collapsible "Memory Usage Details".

Device numbers are the PJRT allocator's (``memory_stats()``; on CPU the live-array sum); the
program rows are XLA's static memory analysis of each executable (per device).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from xmon.model import HostSample, Job, JobDevice, Program
from xmon.top import fmt
from xmon.top.viewmodel import job_memory_in_use, job_memory_limit

_DEFAULT_OPEN = ("job", "devices")  # node kinds open until the user says otherwise


def memory_summary(host: HostSample | None, jobs: Sequence[Job]) -> RenderableType:
    """Host totals, then device memory summed per job (totals labelled as such)."""
    table = Table(expand=True, box=None, padding=(0, 1), header_style="bold")
    for name in ("SCOPE", "IN USE", "PEAK", "LIMIT", "LARGEST PROGRAM PEAK"):
        table.add_column(name, justify="left" if name == "SCOPE" else "right", no_wrap=True)
    if host is not None:
        table.add_row(
            "host (all processes)", fmt.human_bytes(host.memory_used_bytes), "",
            fmt.human_bytes(host.memory_total_bytes), "",
        )  # fmt: skip
    for job in jobs:
        peaks = [d.memory.peak_bytes_in_use for d in job.devices]
        peak = sum(p for p in peaks if p is not None) if None not in peaks and peaks else None
        table.add_row(
            f"{job.job_name}:{job.pid} total over {len(job.devices)} devices",
            fmt.human_bytes(job_memory_in_use(job)), fmt.human_bytes(peak),
            fmt.human_bytes(job_memory_limit(job)), fmt.human_bytes(_largest_peak(job.programs)),
        )  # fmt: skip
    return table


def _largest_peak(programs: Sequence[Program]) -> int | None:
    known = [p.peak_memory_bytes for p in programs if p.peak_memory_bytes is not None]
    return max(known) if known else None


def _device_label(device: JobDevice) -> Text:
    m = device.memory
    text = Text(f"{device.info.platform} {device.info.id} ({device.info.device_kind})  ")
    text.append(f"in use {fmt.human_bytes(m.in_use_bytes)}  ")
    text.append(f"peak {fmt.human_bytes(m.peak_bytes_in_use)}  ")
    text.append(f"limit {fmt.human_bytes(m.bytes_limit)}")
    if m.fragmentation_ratio is not None:
        text.append(f"  fragmentation {fmt.percent(m.fragmentation_ratio)}")
    return text


def _program_label(p: Program) -> Text:
    text = Text(
        f"{p.name}  args {fmt.human_bytes(p.argument_bytes)}  out {fmt.human_bytes(p.output_bytes)}"
        f"  temp {fmt.human_bytes(p.temp_bytes)}  code {fmt.human_bytes(p.generated_code_bytes)}"
        f"  peak {fmt.human_bytes(p.peak_memory_bytes)}"
    )
    bound = holds_at_most(p)
    if bound is not None:
        text.append(f"  ({PEAK_BELOW_TEMP_MARK} holds up to {fmt.human_bytes(bound)})", style="dim")
    return text


PEAK_BELOW_TEMP_MARK = "peak < temp:"


def holds_at_most(p: Program) -> int | None:
    """Where XLA's peak is below the program's temp allocation, what it can hold at once:
    arguments, outputs and the whole temp allocation. XLA's ``peak_memory_in_bytes`` is its
    simulation of the buffers live at once, which can leave the temp allocation out (measured
    on CPU, jax 0.12: a gradient's peak was exactly its arguments plus outputs, 3 MiB, beside
    6 MiB of temp). None where the peak is not below temp, or a figure is unknown."""
    parts = (p.argument_bytes, p.output_bytes, p.temp_bytes)
    if p.peak_memory_bytes is None or p.temp_bytes is None or None in parts:
        return None
    if p.peak_memory_bytes >= p.temp_bytes:
        return None
    return sum(part or 0 for part in parts)


def _job_label(job: Job) -> Text:
    text = Text(f"{job.job_name}:{job.pid}", style="bold")
    text.append(f"  device memory {fmt.human_bytes(job_memory_in_use(job))} in use")
    return text


def tree_items(jobs: Sequence[Job]) -> list[tuple[str, str | None, str, Text]]:
    """(key, parent key, kind, label) in display order."""
    items: list[tuple[str, str | None, str, Text]] = []
    for job in jobs:
        jk = f"job:{job.pid}"
        items.append((jk, None, "job", _job_label(job)))
        items.append((f"{jk}:devices", jk, "devices", Text(f"devices ({len(job.devices)})")))
        for d in job.devices:
            items.append((f"{jk}:device:{d.info.id}", f"{jk}:devices", "leaf", _device_label(d)))
        items.append((f"{jk}:programs", jk, "programs", Text(f"programs ({len(job.programs)})")))
        for p in job.programs:
            items.append((f"{jk}:program:{p.fingerprint}", f"{jk}:programs", "leaf",
                          _program_label(p)))  # fmt: skip
    return items


class MemoryTree(Tree[str]):
    """Jobs → devices / programs. Labels update in place while the structure is unchanged, so
    the cursor and the user's expanded/collapsed choices survive each refresh."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("memory", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.nodes_by_key: dict[str, TreeNode[str]] = {}
        self.open: dict[str, bool] = {}  # the user's choice per node key

    def show(self, jobs: Sequence[Job]) -> None:
        items = tree_items(jobs)
        if [k for k, *_ in items] == list(self.nodes_by_key):
            for key, _, _, label in items:
                self.nodes_by_key[key].set_label(label)
            return
        self.clear()
        self.nodes_by_key = {}
        for key, parent, kind, label in items:
            under = self.root if parent is None else self.nodes_by_key[parent]
            expand = self.open.get(key, kind in _DEFAULT_OPEN)
            if kind == "leaf":
                node = under.add_leaf(label, data=key)
            else:
                node = under.add(label, data=key, expand=expand)
            self.nodes_by_key[key] = node

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[str]) -> None:
        if event.node.data is not None:
            self.open[event.node.data] = True

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed[str]) -> None:
        if event.node.data is not None:
            self.open[event.node.data] = False

    def toggle_all(self) -> None:
        """neuron-top's ``x``: expand everything, or collapse everything if all is open."""
        branches = [n for n in self.nodes_by_key.values() if n.allow_expand]
        expand = not all(n.is_expanded for n in branches)
        for node in branches:
            node.expand() if expand else node.collapse()
            if node.data is not None:
                self.open[node.data] = expand
