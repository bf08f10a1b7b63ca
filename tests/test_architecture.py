"""The shape of the code, checked: the import graph of `minifier` and `server` has no cycle, the
server uses only the minifier's contract and readers, and what must stay torch-free does."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import KEEP_WARM, child_env, events_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("minifier", "server")
# The minifier's layers, lowest first: a module imports only modules of its own layer and of those below
# (the package's __init__ and __main__, and examples/, the bundled failing models, stand above them all).
LAYERS = ("contract", "exchange", "program", "processes", "driver")
# What the language server may load of the minifier: the contract layer alone (the CLI's events and
# failure.json with their JSON codec, the readers of a dump, the stdlib-only process helpers, the dump's lock).
SERVER_MAY_IMPORT = "minifier.contract"
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
    # the fork server's child serves as a worker
    assert "minifier.processes.worker" in graph["minifier.processes.forkserver"]
    assert "minifier.driver.minify" in graph["minifier.driver.cli"]  # imported inside a function: still an import
    assert "server.server" not in graph["server.discovery"]  # only under TYPE_CHECKING
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def layer(module: str) -> int:
    """The rank of a minifier module's layer; above every layer for the package itself and examples/."""
    part = module.split(".")[1] if module.count(".") else ""
    return LAYERS.index(part) if part in LAYERS else len(LAYERS)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (module, other)
        for module, imports in graph.items()
        if module.startswith("minifier")
        for other in imports
        if other.startswith("minifier") and layer(other) > layer(module)
    )


def test_each_layer_of_the_minifier_imports_only_its_own_and_those_below():
    graph = import_graph()
    assert {m.split(".")[1] for m in graph if m.count(".") and layer(m) < len(LAYERS)} == set(LAYERS)
    assert upward_imports(graph) == []
    # the check sees one: the contract reaching up to the pool
    assert upward_imports({"minifier.contract.a": {"minifier.processes.b"}, "minifier.processes.b": set()}) == [
        ("minifier.contract.a", "minifier.processes.b")
    ]


# The sources of evidence raced beside the search and their protocol: parts of the minify run, imported by it alone
EVIDENCE = {f"minifier.driver.{m}" for m in ("evidence", "kernel_evidence", "accuracy_probe", "early_check")}


def test_only_the_minify_run_imports_the_sources_of_evidence():
    graph = import_graph()
    importers = {m for m, imports in graph.items() if imports & EVIDENCE and m not in EVIDENCE}
    assert importers == {"minifier.driver.minify"}, importers


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
    assert all(m.startswith(SERVER_MAY_IMPORT) for m in used if m.partition(".")[0] == "minifier")


def without_torch(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a Python that refuses to import torch (its children, the workers, may)."""
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env=child_env(),
    )


def test_the_server_and_the_command_line_load_without_torch():
    proc = without_torch("""
        import json
        from server.server import create_server
        create_server()
        server_side = sorted(m for m in sys.modules if m.startswith("minifier."))
        from minifier.driver.cli import build_parser
        build_parser().parse_args(["minify", "minifier_launcher.py", "--workers", "2", "--keep-warm", "60"])
        import minifier.driver.capture, minifier.driver.minify, minifier.driver.reproduce
        print(json.dumps(server_side))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(m.startswith(SERVER_MAY_IMPORT) for m in json.loads(proc.stdout))


@pytest.mark.compile
def test_the_driver_runs_a_failure_without_importing_torch(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path))
    proc = without_torch(
        f"""
        from minifier.driver.cli import main
        code = main(["run", {launcher!r}, "--events", *{KEEP_WARM!r}])
        assert "torch" not in sys.modules
        sys.exit(code)
    """,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [e for e in events_of(proc) if e.event == "failure"]


def test_both_commands_say_their_versions_without_importing_torch():
    from minifier.contract.events import SCHEMA_VERSION
    from server import __version__
    from server.protocol import PROTOCOL_VERSION

    minify = without_torch("from minifier.driver.cli import main\nmain(['--version'])")
    torch = importlib.metadata.version("torch") if importlib.util.find_spec("torch") else "not installed"
    assert minify.returncode == 0, minify.stderr[-2000:]
    assert minify.stdout.startswith(f"aoti-minify {__version__} (events schema {SCHEMA_VERSION}); torch {torch}, ")
    lsp = without_torch("from server.__main__ import main\nmain(['--version'])")
    assert lsp.returncode == 0 and lsp.stdout.strip() == f"aoti-lsp {__version__} (client protocol {PROTOCOL_VERSION})"
