"""The shape of the code, checked: the import graph of `minifier` and `server` has no cycle, the
server uses only the minifier's contract and readers, and what must stay torch-free does."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import events_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("minifier", "server")
# What the language server may load of the minifier: the CLI contract (events, with the JSON codec
# its events use), the readers of a dump (launcher, signature, layout, repro.py's graph) and the
# stdlib-only process helpers (exit text, signalling a job's group, a child's environment), and the
# dump's lock (is a run on it alive?).
SERVER_MAY_IMPORT = {
    "minifier.events",
    "minifier.wire",
    "minifier.launcher",
    "minifier.signature",
    "minifier.layout",
    "minifier.artifacts",
    "minifier.procs",
    "minifier.lock",
}
NO_TORCH = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ImportError(f"{name} imported by a process that must stay torch-free")
sys.meta_path.insert(0, NoTorch())
"""


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
            # `from package import module` imports the module; `from module import name`, the module
            names.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
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


def reachable(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for other in graph[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    return seen


def test_the_server_uses_only_the_minifiers_contract_and_readers():
    graph = import_graph()
    used = reachable(graph, [m for m in graph if m.partition(".")[0] == "server"])
    assert {m for m in used if m.partition(".")[0] == "minifier"} <= SERVER_MAY_IMPORT


def without_torch(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a Python that refuses to import torch (its children, the workers, may)."""
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def test_the_server_and_the_command_line_load_without_torch():
    proc = without_torch("""
        import json
        from server.server import create_server
        create_server()
        server_side = sorted(m for m in sys.modules if m.startswith("minifier."))
        from minifier.cli import build_parser
        build_parser().parse_args(["minify", "minifier_launcher.py", "--workers", "2", "--keep-warm", "60"])
        import minifier.capture, minifier.minify, minifier.reproduce
        print(json.dumps(server_side))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(json.loads(proc.stdout)) <= SERVER_MAY_IMPORT


@pytest.mark.compile
def test_the_driver_runs_a_failure_without_importing_torch(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path))
    proc = without_torch(
        f"""
        from minifier.cli import main
        code = main(["run", {launcher!r}, "--events"])
        assert "torch" not in sys.modules
        sys.exit(code)
    """,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e for e in events_of(proc) if e.event == "failure"]
