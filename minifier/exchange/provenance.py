"""From a failing generated kernel back to the graph nodes and the user's model lines.

Exact evidence first: Inductor's provenance tracking, turned on in the worker that compiles the
original (kernel name -> the graph nodes it came from, for C++ and Triton kernels alike), and the
`# Topologically Sorted Source Nodes: [add, relu]` comment Triton wrappers write above each kernel.
An error that names no kernel (a run that raises in an extern call, or dies inside a kernel) is
placed by AOTI's launch trace of that run: the wrapper line of a failed API call, or the kernel
launch that began and never ended; where a call the trace does not show (the proxy executor's) raised
before that launch, by the chains of nodes from each such call to it.
Only without either do the op names in the kernel's name (`cpp_fused_add_relu_3`) select graph
nodes, and the connected groups of them that cover every op are its likely origin: a guess.

Torch-free (driver, worker and server use it).
"""

from __future__ import annotations

import os
import re
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from ..contract.signature import ErrorAnalysis, KernelRef, kernel_ops
from .worker_protocol import BRANCH_SEPARATOR, GraphInfo
from .worklog import CODEGEN_FAILED

_LAUNCH = re.compile(r"^\[ (?P<when>before|after)_launch: (?P<name>.+?) \]\s*$", re.M)
# Inductor runs each Triton kernel while compiling (to pick its launch config); with blocking launches a
# device-side assert raises there, logged by its launcher before the compile fails.
_COMPILE_LAUNCH_FAILED = re.compile(r"Failed during launch (?P<name>triton_\w+)")
_API_FAILED = re.compile(r"API call failed at (?P<file>/\S+?\.cpp), line (?P<line>\d+)")
# An ATen call through AOTI's C shim (a fallback op, the proxy executor) that raised: logged, not traced.
_SHIM_EXCEPTION = re.compile(r"\] Exception in aoti_torch: (?P<message>[^\n]*)")
_SHIM_CALL = re.compile(r"^(at::_ops::|aoti_torch_(cpu|cuda|xpu|mps)_)")
_HANDLE = re.compile(r"\[Provenance debug handles\] (?P<key>\S+)")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?P<code>[^\n]*)', re.M)
_SOURCE_NODES = re.compile(r"Topologically Sorted Source Nodes: \[(?P<nodes>[^\]]*)\]")
_DEF = re.compile(r"^def (?P<name>triton_\w+)\(", re.M)
# a kernel's definition, not the declarations by which AOTI's wrapper calls it
_CPP_FUNC = re.compile(r'^extern "C"\s+void\s+(?P<name>\w+)\([^;{}]*\)\s*\{', re.M)
_CPP_FUNC_END = re.compile(r"^\}", re.M)
_PYBINDING = re.compile(
    r"^(?P<name>\w+) = async_compile\.cpp_pybinding\(\[[^\]]*\], r'''(?P<source>.*?)'''", re.M | re.S
)
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


# Kernel names use the ATen ops Inductor saw after decomposing the exported graph's ops.
_DECOMPOSED_FROM = {
    "native_layer_norm": "layer_norm",
    "native_batch_norm": "batch_norm",
    "native_group_norm": "group_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "native_dropout": "dropout",
    "addmm": "linear",
    "mm": "linear",
    "t": "linear",
    "bmm": "matmul",
    "convolution": "conv2d",
    "_softmax": "softmax",
    "_log_softmax": "log_softmax",
    "erf": "gelu",
}
MAX_ANCHORS = 4


# Ops whose compile (autotuning, template kernels) can cost more than the rest of a small graph.
EXPENSIVE_OPS = {
    "convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "matmul",
    "linear",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}


def failing_kernel(error: ErrorAnalysis | None, log: str, provenance: Mapping[str, list[str]]) -> KernelRef | None:
    """The kernel a failure happened in: the one its error names, else the one the original's run
    failed in (from its log: the launch trace and the provenance of its compile), else, for an error
    raised while compiling, the kernel whose code was being generated (`failed_codegen`, else
    `last_generated`)."""
    if error is not None and error.kernel is not None:
        return error.kernel
    compiling = error is not None and error.signature.kind == "compile_error"
    fused = failed_codegen(provenance) if compiling else None
    key = failing_launch(log, provenance) or fused or (last_generated(provenance) if compiling else None)
    if key is None:
        return None
    return KernelRef(name=key.rpartition(":")[0], source_nodes=list(provenance[key]), exact=True, fused=key == fused)


def call_above(kernel: KernelRef, provenance: Mapping[str, list[str]]) -> list[str]:
    """For an error in AOTI's wrapper code (a line no kernel encloses): the graph nodes of the call the wrapper makes
    just above that line, a guess at what it was writing code for."""
    key = _handle_above(kernel.file, kernel.line) if kernel.file and kernel.line else None
    return list(provenance.get(key, ())) if key else []


def failed_codegen(provenance: Mapping[str, list[str]]) -> str | None:
    """The scheduler node whose code generation raised (recorded by the worker: it has no handle yet)."""
    return next((k for k in provenance if k.endswith(f":{CODEGEN_FAILED}") and provenance[k]), None)


def last_generated(provenance: Mapping[str, list[str]]) -> str | None:
    """Inductor gives a kernel its debug handle, in code generation order, before generating its code:
    when generating code raises (an extern call that cannot take a complex scalar: AssertionError: got
    <class 'complex'>) the kernel of the highest handle is the one it failed in. An error of a later step
    (the C++ compile) names its kernel itself, which comes first."""
    keys = [k for k in provenance if provenance[k] and k.rpartition(":")[2].isdigit()]
    return max(keys, key=_handle_number) if keys else None


def failing_launch(log: str, provenance: Mapping[str, list[str]]) -> str | None:
    """The provenance key (`name:handle`) of the kernel a compiled program failed in: the kernel whose
    launch failed while Inductor compiled it (its first handle), else the one above the wrapper line that
    a failed AOTI API call names, else the launch that began and never ended (a kernel's n-th launch is
    its n-th debug handle: the wrapper runs them in that order) unless an op raised before it."""
    compiling = _COMPILE_LAUNCH_FAILED.search(log)
    if compiling and (keys := _launches_of(compiling.group("name"), provenance)):
        return keys[0]
    failed = list(_API_FAILED.finditer(log))
    if failed:
        key = _handle_above(failed[-1].group("file"), int(failed[-1].group("line")))
        if key in provenance:
            return key
    launches = list(_LAUNCH.finditer(log))
    if not launches or launches[-1].group("when") != "before":
        return None
    shim = _SHIM_EXCEPTION.search(log)
    if shim and shim.start() < launches[-1].start():
        # An untraced op failed first and the run went on (CUDA, proxy executor: Qwen2's complex sub); the
        # launch that never ended then read its missing output. Guessing that kernel cost four workers.
        return None
    name = launches[-1].group("name")
    nth = sum(1 for m in launches if m.group("when") == "before" and m.group("name") == name)
    keys = _launches_of(name, provenance)
    return keys[nth - 1] if nth <= len(keys) else None


@dataclass(frozen=True)
class UntracedFailure:
    """An op the launch trace does not show (a proxy-executor call) raised, the run went on, and a later launch
    failed reading what it left undefined (CUDA: Qwen2's complex sub raised, `_fft_c2r` got no input, the
    `add` kernel after it failed). The culprit is the chain from the op that raised to that launch."""

    suspects: list[str]  # provenance keys of the untraced calls that may have raised, in the wrapper's order
    failing: str  # the provenance key of the launch that failed
    raised: str  # what the first of them raised (the error the run reports is the failing launch's)

    def nodes(self, provenance: Mapping[str, list[str]]) -> list[str]:
        """The suspects' graph nodes, in the wrapper's order."""
        return [n for key in self.suspects for n in provenance.get(key, ())]


def untraced_failure(log: str, provenance: Mapping[str, list[str]]) -> UntracedFailure | None:
    """The calls between the last launch that ended before the first shim exception and the launch that never
    ended, which the trace does not show: one of them raised first."""
    launches = list(_LAUNCH.finditer(log))
    shim = _SHIM_EXCEPTION.search(log)
    if not launches or launches[-1].group("when") != "before" or not shim or shim.start() > launches[-1].start():
        return None
    keys = _traced_keys(launches, provenance)
    failing = keys[-1]
    ended = [k for m, k in zip(launches, keys) if m.group("when") == "after" and m.start() < shim.start()]
    last = ended[-1] if ended else ":0"
    if failing is None or last is None:
        return None
    low, high = _handle_number(last), _handle_number(failing)
    traced = set(keys)
    suspects = [k for k in provenance if low < _handle_number(k) < high and k not in traced and provenance[k]]
    suspects.sort(key=_handle_number)
    return UntracedFailure(suspects, failing, shim.group("message").strip()) if suspects else None


def _traced_keys(launches: list[re.Match[str]], provenance: Mapping[str, list[str]]) -> list[str | None]:
    """The provenance key of each line of a launch trace (a kernel's n-th launch is its n-th handle); an
    ATen call through the C shim is traced by its op (`at::_ops::_fft_r2c::call`), keyed by its shim function
    (`aoti_torch_cuda__fft_r2c`)."""
    by_op: dict[str, list[str]] = {}
    for key in sorted(provenance, key=_handle_number):
        by_op.setdefault(_shim_op(key.rpartition(":")[0]), []).append(key)
    seen: Counter[str] = Counter()
    keys: list[str | None] = []
    for m in launches:
        op = _shim_op(m.group("name"))
        nth = seen[op]
        if m.group("when") == "before":
            seen[op] += 1
        else:
            nth -= 1
        known = by_op.get(op, [])
        keys.append(known[nth] if 0 <= nth < len(known) else None)
    return keys


def _shim_op(name: str) -> str:
    return _SHIM_CALL.sub("", name).removesuffix("::call")


def _launches_of(name: str, provenance: Mapping[str, list[str]]) -> list[str]:
    """A kernel's provenance keys in the order the wrapper launches it (by debug handle)."""
    return sorted((k for k in provenance if k.rpartition(":")[0] == name), key=_handle_number)


def _handle_above(wrapper: str, line: int) -> str | None:
    try:
        with open(wrapper, encoding="utf-8", errors="replace") as f:
            above = [next(f, "") for _ in range(line)]
    except OSError:
        return None
    keys = [m.group("key") for text in above for m in _HANDLE.finditer(text)]
    return keys[-1] if keys else None


def _handle_number(key: str) -> int:
    number = key.rpartition(":")[2]
    return int(number) if number.isdigit() else 0


def resolve_kernel(
    kernel: KernelRef,
    graph: GraphInfo,
    source: str | None,
    extra_texts: Iterable[str] = (),
    provenance: Mapping[str, list[str]] | None = None,
) -> KernelRef:
    """Fill in the kernel's name, ATen ops and source nodes from its file and the graph.

    Source nodes are exact when Inductor names them (`provenance`: kernel name -> graph nodes, from
    its provenance tracking; or a wrapper's comment); otherwise they are the smallest connected
    group of graph nodes that uses every op of the kernel's name.
    """
    name = kernel.name or _name_at_line(source, kernel.line)
    graph_ops = {n.op for n in graph.nodes if n.kind == "compute"}
    ops = kernel_ops(name, graph_ops | set(_DECOMPOSED_FROM)) if name else list(kernel.aten_ops)
    if kernel.source_nodes:
        compute = set(graph.compute_nodes())
        nodes = sorted((n for n in kernel.source_nodes if n in compute), key=_order(graph))
        return replace(kernel, name=name, aten_ops=ops, source_nodes=nodes)
    nodes = _tracked_source_nodes(name, provenance or {}, graph) or _named_source_nodes(
        name, [source or "", *extra_texts], graph
    )
    if nodes:
        return replace(kernel, name=name, aten_ops=ops, source_nodes=nodes, exact=True)
    covers = [c for _, c in _anchored_covers(ops, graph)]
    smallest: frozenset[str] = min(covers, key=len) if covers else frozenset()
    nodes = sorted(smallest, key=_order(graph))
    return replace(kernel, name=name, aten_ops=ops, source_nodes=nodes)


def kernel_slices(kernel: KernelRef | None, graph: GraphInfo) -> list[frozenset[str]]:
    """Small subgraphs likely to hold the failing kernel's origin, best first: single nodes of the
    kernel's rarest ops (the most specific evidence), then the kernel's whole group.

    With exact source nodes only those are tried. Op-name guesses come last and never cost an
    expensive compile (a convolution, a matmul) when a cheaper guess exists."""
    if kernel is None:
        return []
    compute = set(graph.compute_nodes())
    exact = frozenset(kernel.source_nodes) & compute if kernel.exact else frozenset()
    if exact:
        # a kernel that failed while its nodes were fused into one needs them together (index_put's mask
        # fused into a softmax: each single node passes)
        groups, singles = [exact], ([] if kernel.fused else list(exact))
    else:
        covers = _anchored_covers(kernel.aten_ops, graph)
        groups, singles = [c for _, c in covers], [a for a, _ in covers]
    rarity = Counter(n.op for n in graph.nodes if n.kind == "compute")
    by_name, order = graph.by_name(), _order(graph)
    kernel_ops = set(kernel.aten_ops)
    single_slices = {s: _with_parts(frozenset({s}), graph) for s in singles}

    def evidence(single: str) -> tuple[int, int, int]:
        """The rarest of the kernel's ops its slice holds, then how many of them: a cond whose branch
        holds the kernel's relu beats a node of a lone op that only feeds the kernel."""
        ops = {by_name[n].op for n in single_slices[single] if n in by_name}
        held = [rarity[op] for op in ops if op in kernel_ops]
        return (min(held) if held else rarity[by_name[single].op], -len(held), order(single))

    singles = sorted(single_slices, key=evidence)[:MAX_ANCHORS]
    slices = [single_slices[s] for s in singles] + [_with_parts(g, graph) for g in sorted(groups, key=len) if g]
    slices = list(dict.fromkeys(slices))
    if not exact:
        cheap = [s for s in slices if not expensive(s, graph)]
        slices = cheap or slices
    return slices


def chain_slices(
    failure: UntracedFailure, provenance: Mapping[str, list[str]], graph: GraphInfo
) -> list[frozenset[str]]:
    """For each untraced call that may have raised, its nodes and those on the paths from them to the first of
    the failing launch's nodes they reach: without the path, what the call leaves undefined is never read and
    the run passes (each node of Qwen2's complex sub alone passes). Earliest call first: its chain
    holds the later ones."""
    args = graph.compute_args()
    readers: dict[str, list[str]] = {}
    for node, operands in args.items():
        for operand in operands:
            readers.setdefault(operand, []).append(node)
    targets = set(provenance.get(failure.failing, ())) & set(args)
    slices = []
    for key in failure.suspects:
        downstream = _reach(set(provenance[key]) & set(args), readers)
        reached = targets & downstream
        first = {t for t in reached if not (_reach({t}, args) - {t}) & reached}
        chain = downstream & _reach(first, args)
        if chain:
            slices.append(_with_parts(frozenset(chain), graph))
    return list(dict.fromkeys(slices))


def _reach(start: set[str], edges: Mapping[str, list[str]]) -> set[str]:
    """`start` and every node reachable from it along `edges`."""
    seen, todo = set(start), list(start)
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _with_parts(nodes: frozenset[str], graph: GraphInfo) -> frozenset[str]:
    """A slice holding a node of several outputs (a torch.cond, an op returning a tuple) takes the getitems
    that read them, and a cond its branches' nodes (`<branch>.<node>`, which read the cond): without them
    its outputs are dead code or its branches empty, and the bug is compiled away (the relu inside a cond
    branch of nn-transformer-cond, whose kernel Inductor traces to the cond: each slice passed)."""
    parts = {
        n.name
        for n in graph.nodes
        if n.kind == "compute" and set(n.args) & nodes and (n.op == "getitem" or BRANCH_SEPARATOR in n.name)
    }
    return nodes | parts


def expensive(nodes: Iterable[str], graph: GraphInfo) -> bool:
    by_name = graph.by_name()
    return any(by_name[n].op in EXPENSIVE_OPS for n in nodes if n in by_name)


def _tracked_source_nodes(name: str | None, provenance: Mapping[str, list[str]], graph: GraphInfo) -> list[str]:
    """The graph nodes of kernel `name` (a generated kernel's name is unique; its key adds a debug handle)."""
    compute = set(graph.compute_nodes())
    found = {n for key, nodes in provenance.items() if name and key.rpartition(":")[0] == name for n in nodes}
    return sorted(found & compute, key=_order(graph))


def _graph_ops(kernel_ops: list[str], graph: GraphInfo) -> set[str]:
    present = {n.op for n in graph.nodes if n.kind == "compute"}
    mapped = {op if op in present else _DECOMPOSED_FROM.get(op, op) for op in kernel_ops}
    return mapped & present


def _anchored_covers(kernel_ops: list[str], graph: GraphInfo) -> list[tuple[str, frozenset[str]]]:
    """For each node of the kernel's rarest op (the most specific evidence), the nearest nodes of
    the kernel's other ops through the subgraph of kernel-op nodes, with the paths joining them."""
    wanted = _graph_ops(kernel_ops, graph)
    nodes = {n.name: n for n in graph.nodes if n.kind == "compute" and n.op in wanted}
    if not nodes:
        return []
    neighbours: dict[str, set[str]] = {name: set() for name in nodes}
    for n in nodes.values():
        for a in n.args:
            if a in nodes:
                neighbours[n.name].add(a)
                neighbours[a].add(n.name)
    count = {op: sum(1 for n in nodes.values() if n.op == op) for op in wanted}
    rarest = min(count.values())
    anchors = [name for name, n in nodes.items() if count[n.op] == rarest][:MAX_ANCHORS]
    return [(a, _cover(a, wanted, nodes, neighbours)) for a in anchors]


def _cover(anchor: str, wanted: set[str], nodes, neighbours) -> frozenset[str]:
    """Breadth-first from the anchor; each op's nearest node joins with the path that reached it."""
    came_from = {anchor: anchor}
    queue = deque([anchor])
    cover = {anchor}
    missing = wanted - {nodes[anchor].op}
    while queue and missing:
        current = queue.popleft()
        if nodes[current].op in missing:
            missing.discard(nodes[current].op)
            step = current
            while step not in cover:
                cover.add(step)
                step = came_from[step]
        for nxt in sorted(neighbours[current]):
            if nxt not in came_from:
                came_from[nxt] = current
                queue.append(nxt)
    return frozenset(cover)


def model_lines(nodes: Iterable[str], graph: GraphInfo):
    by_name = graph.by_name()
    seen = []
    for name in nodes:
        info = by_name.get(name)
        if info is not None and info.source is not None and info.source not in seen:
            seen.append(info.source)
    return seen


def _name_at_line(source: str | None, line: int | None) -> str | None:
    """The kernel function enclosing `line` (1-based) of a generated kernel file; None for a line of C++ past the end
    of the kernel above it (the wrapper's own code, after the kernels in a one-file build)."""
    if not source:
        return None
    names = sorted(_kernel_spans(source))
    if not names:
        return None
    if line is None:
        return names[0][2]
    enclosing = [(end, name) for start, end, name in names if start <= line]
    if not enclosing:
        return names[0][2]
    end, name = enclosing[-1]
    return name if end is None or line <= end else None


def _kernel_spans(source: str) -> Iterator[tuple[int, int | None, str]]:
    """Each kernel's first line, its last (C++: its closing brace; Python: not known) and its name."""

    def line_of(offset: int) -> int:
        return source.count("\n", 0, offset) + 1

    for m in _DEF.finditer(source):
        yield line_of(m.start()), None, m.group("name")
    for m in _CPP_FUNC.finditer(source):
        closing = _CPP_FUNC_END.search(source, m.end())
        yield line_of(m.start()), line_of(closing.start()) if closing else None, m.group("name")


PYBINDING_KERNEL = "kernel"  # the name of every C++ kernel's function under Inductor's Python wrapper


def pybinding_name(wrapper: str, source: str) -> str | None:
    """The name Inductor's Python wrapper module gives the C++ kernel whose file holds `source` (the kernel's code,
    then the binding Inductor appends)."""
    source = source.strip()
    for found in _PYBINDING.finditer(wrapper):
        body = found.group("source").strip()
        if body and source.startswith(body):
            return found.group("name")
    return None


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
