"""The shape of the code, checked: the import graph of `minifier` and `server` has no cycle."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("minifier", "server")


def modules() -> dict[str, str]:
    """Every module of our packages, by dotted name, with its file."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) or getattr(test, "attr", None)) == "TYPE_CHECKING"


def imported(module: str, path: str, known: dict[str, str]) -> set[str]:
    """The modules of ours that `module` imports when it runs, in functions too. Imports under
    `if TYPE_CHECKING:` never run (they only name types) and are left out."""
    is_package = path.endswith("__init__.py")
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    skipped = {id(n) for block in ast.walk(tree) if _type_checking(block) for n in ast.walk(block)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in names if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imported(module, path, known) for module, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_import_graph_is_read_as_python_runs_it():
    graph = import_graph()
    assert "minifier.worker" in graph["minifier.forkserver"]  # the fork server's child serves as a worker
    assert "minifier.minify" in graph["minifier.cli"]  # imported inside a function: still an import
    assert "server.server" not in graph["server.discovery"]  # only under TYPE_CHECKING
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []
