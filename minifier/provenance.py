"""From a failing generated kernel back to the graph nodes and the user's model lines.

Inductor names kernels after the ATen ops they fuse (`cpp_fused_add_relu_3`) and, for Triton,
writes `# Topologically Sorted Source Nodes: [add, relu]` above each kernel in the wrapper code.
The exact node names win when present; otherwise the kernel's op names select the graph nodes of
those ops, and the connected groups of them that cover every op are the kernel's likely origin.

Torch-free (driver, worker and server use it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import replace

from .protocol import GraphInfo
from .signature import KernelRef, kernel_ops

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?P<code>[^\n]*)', re.M)
_SOURCE_NODES = re.compile(r"Topologically Sorted Source Nodes: \[(?P<nodes>[^\]]*)\]")
_DEF = re.compile(r"^def (?P<name>triton_\w+)\(", re.M)
_CPP_FUNC = re.compile(r'^extern "C"\s+void\s+(?P<name>\w+)\(', re.M)
_LIBRARY_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}", f"{os.sep}lib{os.sep}python")
MAX_KERNEL_SOURCE = 256 * 1024


def user_frame(stack_trace: str) -> tuple[str, int, str] | None:
    """The innermost frame of the user's own code (not torch, not another installed library)."""
    frames = [(m.group("file"), int(m.group("line")), m.group("code").strip()) for m in _FRAME.finditer(stack_trace)]
    for file, line, code in reversed(frames):
        if not any(part in file for part in _LIBRARY_PARTS) and not file.startswith("<"):
            return file, line, code
    return None


def read_kernel_source(kernel: KernelRef) -> str | None:
    if not kernel.file or not os.path.isfile(kernel.file):
        return None
    try:
        with open(kernel.file, encoding="utf-8", errors="replace") as f:
            return f.read(MAX_KERNEL_SOURCE)
    except OSError:
        return None


def resolve_kernel(kernel: KernelRef, graph: GraphInfo, source: str | None, extra_texts: Iterable[str] = ()) -> KernelRef:
    """Fill in the kernel's name, ATen ops and source nodes from its file and the graph."""
    name = kernel.name or _name_at_line(source, kernel.line)
    vocabulary = {n.op for n in graph.nodes if n.kind == "compute"}
    ops = kernel_ops(name, vocabulary) if name else list(kernel.aten_ops)
    nodes = list(kernel.source_nodes) or _named_source_nodes(name, [source or "", *extra_texts], graph)
    if not nodes and ops:
        slices = op_slices(ops, graph)
        nodes = sorted(slices[0], key=_order(graph)) if len(slices) == 1 else []
    return replace(kernel, name=name, aten_ops=ops, source_nodes=nodes)


def kernel_slices(kernel: KernelRef | None, graph: GraphInfo) -> list[frozenset[str]]:
    """Candidate subgraphs that should contain the failing kernel's origin, smallest first."""
    if kernel is None:
        return []
    compute = set(graph.compute_nodes())
    slices = []
    exact = frozenset(kernel.source_nodes) & compute
    if exact:
        slices.append(exact)
    for s in op_slices(kernel.aten_ops, graph):
        if s not in slices:
            slices.append(s)
    return sorted(slices, key=len)


def op_slices(ops: list[str], graph: GraphInfo) -> list[frozenset[str]]:
    """Connected groups of nodes of the kernel's ops that together use every op of the kernel."""
    wanted = set(ops)
    nodes = [n for n in graph.nodes if n.kind == "compute" and n.op in wanted]
    if not nodes or not wanted:
        return []
    by_name = {n.name: n for n in nodes}
    parent = {n.name: n.name for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in nodes:
        for a in n.args:
            if a in by_name:
                parent[find(a)] = find(n.name)
    groups: dict[str, set[str]] = {}
    for n in nodes:
        groups.setdefault(find(n.name), set()).add(n.name)
    covering = [frozenset(g) for g in groups.values() if {by_name[x].op for x in g} >= wanted]
    return sorted(covering, key=len)


def model_lines(nodes: Iterable[str], graph: GraphInfo):
    by_name = graph.by_name()
    seen = []
    for name in nodes:
        info = by_name.get(name)
        if info is not None and info.source is not None and info.source not in seen:
            seen.append(info.source)
    return seen


def _name_at_line(source: str | None, line: int | None) -> str | None:
    """The kernel function enclosing `line` (1-based) of a generated kernel file."""
    if not source:
        return None
    names = [(source.count("\n", 0, m.start()) + 1, m.group("name"))
             for pattern in (_DEF, _CPP_FUNC) for m in pattern.finditer(source)]
    names.sort()
    if not names:
        return None
    if line is None:
        return names[0][1]
    enclosing = [name for start, name in names if start <= line]
    return enclosing[-1] if enclosing else names[0][1]


def _named_source_nodes(name: str | None, texts: list[str], graph: GraphInfo) -> list[str]:
    """Node names from the comment Inductor writes above the kernel `name` in wrapper code."""
    if not name:
        return []
    compute = set(graph.compute_nodes())
    for text in texts:
        at = text.find(name)
        while at != -1:
            comments = list(_SOURCE_NODES.finditer(text, max(0, at - 4000), at))
            if comments:
                names = [s.strip() for s in comments[-1].group("nodes").split(",")]
                found = [n for n in names if n in compute]
                if found:
                    return found
            at = text.find(name, at + 1)
    return []


def _order(graph: GraphInfo):
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    return lambda name: index.get(name, 0)
