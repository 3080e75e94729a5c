"""The tree keeps its shape: its layers (import-linter's contracts in pyproject.toml: the CLI
over the views over the daemon over its parts over the agent over what all share; jax only in
the agent), no import circles between xmon's modules (a function-level or type-checking import
counts too), every package is in the distribution, and ruff is clean."""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = {"xmon": REPO / "xmon"}
# `import xmon; xmon.attach()` is the public face of the agent: the package imports the agent
# when attach() is called, and the agent reads the package's version. That one edge is by design.
FACADE_EDGES = {("xmon", "xmon.agent")}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, root in SOURCES.items():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The xmon modules ``name`` imports anywhere in its source; ``from P import m`` names the
    submodule P.m where there is one, else P."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target
                elif base in known:
                    yield base


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {name: set() for name in known}
    for name, path in known.items():
        graph[name] = {t for t in imported(name, path, known) if t != name}
        graph[name] -= {t for src, t in FACADE_EDGES if src == name}
    return graph


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_type_checking_imports(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from p.b import B\n")  # fmt: skip
    (tmp_path / "b.py").write_text("def f():\n    from p import a\n")
    known = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    graph = {name: set(imported(name, path, known)) for name, path in known.items()}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_every_package_is_in_the_distribution() -> None:
    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert packages <= listed, sorted(packages - listed)
