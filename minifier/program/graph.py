"""Graph surgery on the exported program (imports torch; used inside workers only).

A candidate is a set of compute-node names of the original graph. Everything a kept node reads
that is not kept becomes an input: original inputs stay inputs, parameters stay parameters (module
attributes, so Inductor still sees constants), the subgraphs of higher-order ops (torch.cond's
branches, while_loop's body) stay submodules, and a removed compute node becomes a placeholder fed
with its concrete value from one eager run of the original. Outputs are the kept nodes no kept node
reads, so nothing kept is dead code. Node names are preserved so kernel origins map back.

Candidates keep the original's dynamic shapes: every input dim that is symbolic in the original is
exported as a `Dim` with the original's range, one `Dim` per symbol, so a failure that needs
symbolic sizes is not lost. A value whose size is an unbacked symbol (`nonzero`'s output and what
follows from it) is never cut: its concrete size would turn the data-dependent size into a backed one
and lose the node that binds the symbol.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import sympy
import torch
import torch.fx as fx
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo

from ..contract.events import FakeMismatch, SourceLine
from ..exchange.provenance import user_frame
from ..exchange.worker_protocol import GraphInfo, NodeInfo
from .branches import Branch, Rebuilt, branch_values, branches_of, fed_name, operands, rebuild
from .weights import node_device, placed

_PARAM_KINDS = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer", InputKind.CONSTANT_TENSOR: "constant"}

# Namespaces of PyTorch's own ops, whose fake kernels PyTorch writes (and tests).
_BUILT_IN = ("aten", "prims", "prim", "quantized", "_quant", "higher_order")


@dataclass
class FlatProgram:
    graph: fx.Graph
    user_inputs: dict[str, object]
    # placeholder or get_attr node name -> (target, kind, tensor or subgraph module)
    params: dict[str, tuple[str, str, object]]
    ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # backed symbol -> its range


def flatten(ep: ExportedProgram) -> FlatProgram:
    args, kwargs = ep.example_inputs or ((), {})
    user_values = iter(pytree.tree_leaves((args, kwargs)))
    user_inputs: dict[str, object] = {}
    params: dict[str, tuple[str, str, torch.Tensor]] = {}
    for spec in ep.graph_signature.input_specs:
        name: str = getattr(spec.arg, "name", "")
        if spec.kind == InputKind.USER_INPUT:
            user_inputs[name] = next(user_values)
        elif spec.kind in _PARAM_KINDS:
            tensor = ep.state_dict.get(spec.target)
            if tensor is None:
                tensor = ep.constants[spec.target]
            params[name] = (spec.target, _PARAM_KINDS[spec.kind], tensor)
        else:
            raise NotImplementedError(f"input {name} of kind {spec.kind.name} is not supported by the minifier")
    for node in ep.graph.find_nodes(op="get_attr"):
        params[node.name] = (node.target, "module", _attr(ep.graph_module, node.target))
    return FlatProgram(graph=ep.graph, user_inputs=user_inputs, params=params, ranges=_ranges(ep))


def _attr(root: torch.nn.Module, target: str) -> object:
    for part in target.split("."):
        root = getattr(root, part)
    return root


def _ranges(ep: ExportedProgram) -> dict[str, tuple[int, int | None]]:
    ranges = {}
    for symbol, bounds in ep.range_constraints.items():
        if isinstance(symbol, sympy.Symbol) and not free_unbacked_symbols(symbol):
            upper = None if bounds.upper in (int_oo, sympy.oo) else int(bounds.upper)
            ranges[symbol.name] = (int(bounds.lower), upper)
    return ranges


def describe(flat: FlatProgram) -> GraphInfo:
    nodes = []
    outputs: list[str] = []
    devices = set()
    for node in flat.graph.nodes:
        if node.op == "output":
            outputs = [a.name for a in node.all_input_nodes]
            continue
        for branch in branches_of(node, _modules(flat)):
            nodes += [_branch_node_info(sub, branch, node, flat) for sub in branch.compute()]
        info = _node_info(node, flat)
        devices.add(info.device)
        nodes.append(info)
    device = next((d for d in sorted(devices) if d != "cpu"), "cpu")
    code = _readable_graph(flat).python_code(root_module="self").src
    return GraphInfo(nodes=nodes, outputs=outputs, code=code.strip(), torch_version=torch.__version__, device=device)


def program_device(flat: FlatProgram) -> torch.device:
    """Where the program runs: the device of its first non-CPU input or parameter, else the CPU (as the graph
    says: the weights themselves stay on the host until a query places them)."""
    devices = (node_device(n) for n in flat.graph.find_nodes(op="placeholder"))
    return next((d for d in devices if d is not None and d.type != "cpu"), torch.device("cpu"))


def _node_info(node: fx.Node, flat: FlatProgram) -> NodeInfo:
    val = node.meta.get("val")
    kind: Literal["input", "param", "compute"]
    if node.name in flat.params:
        kind, target = "param", flat.params[node.name][0]
    elif node.op == "placeholder":
        kind, target = "input", node.name
    else:
        kind, target = "compute", str(node.target)
    source = None
    frame = user_frame(node.meta.get("stack_trace") or "")
    if frame is not None:
        source = SourceLine(file=frame[0], line=frame[1], node=node.name, code=frame[2])
    return NodeInfo(
        name=node.name,
        kind=kind,
        target=target,
        op=_op_name(node),
        args=list(dict.fromkeys(a.name for a in node.all_input_nodes)),
        tensor=isinstance(val, torch.Tensor),
        shape=_shape(val),
        device=str(val.device) if isinstance(val, torch.Tensor) else "cpu",
        source=source,
        bytes=_bytes(val),
    )


def _branch_node_info(node: fx.Node, branch: Branch, cond: fx.Node, flat: FlatProgram) -> NodeInfo:
    """A node of a cond's branch: it needs the cond, and its branch's nodes it reads."""
    info = _node_info(node, flat)
    reads = [branch.qualified(a) for a in node.all_input_nodes if a.op == "call_function"]
    return replace(info, name=branch.qualified(node), args=[*dict.fromkeys(reads), cond.name])


def _modules(flat: FlatProgram) -> dict[str, object]:
    return {name: value for name, (_, kind, value) in flat.params.items() if kind == "module"}


def readable_code(gm: torch.nn.Module) -> str:
    """A module's forward and, below it, its subgraphs' (a torch.cond's branches), for checkpoints' headers."""
    parts = [gm.code.strip()]
    for name, sub in gm.named_children():
        if isinstance(sub, fx.GraphModule):
            parts.append(f"# {name}:\n{sub.code.strip()}")
    return "\n\n".join(parts)


def _op_name(node: fx.Node) -> str:
    packet = getattr(node.target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(node.target, "__name__", str(node.target))


def _bytes(val: object) -> int:
    if not isinstance(val, torch.Tensor) or any(isinstance(s, torch.SymInt) for s in val.shape):
        return 0
    return val.numel() * val.element_size()


def _shape(val: object) -> str:
    if isinstance(val, torch.Tensor):
        return _sized(val.dtype, val.shape)
    return type(val).__name__ if val is not None else ""


def _sized(dtype: torch.dtype, sizes: Iterable[object]) -> str:
    return f"{str(dtype).replace('torch.', '')}[{', '.join(str(s) for s in sizes)}]"


def _readable_graph(flat: FlatProgram) -> fx.Graph:
    """The original graph with parameters as attributes, for display."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in flat.graph.nodes:
        if node.op == "placeholder" and node.name in flat.params:
            env[node] = graph.get_attr(flat.params[node.name][0])
        else:
            env[node] = graph.node_copy(node, lambda a: env[a])
    return graph


def concrete_values(flat: FlatProgram) -> tuple[dict[str, torch.Tensor], str | None]:
    """Every tensor the original graph computes, from one eager run; stops at the first error."""
    values: dict[str, torch.Tensor] = {}
    env: dict[str, object] = {}
    nodes = {n.name: n for n in flat.graph.nodes}
    for name, (_, _, tensor) in flat.params.items():
        env[name] = placed(tensor, node_device(nodes[name]))
    env.update(flat.user_inputs)
    torch.manual_seed(0)
    with torch.no_grad():
        for node in flat.graph.nodes:
            if node.op != "call_function":
                continue
            args, kwargs = pytree.tree_map_only(fx.Node, lambda a: env[a.name], (node.args, node.kwargs))
            try:
                env[node.name] = node.target(*args, **kwargs)
                _store(values, node.name, env[node.name], node)
            except Exception as e:  # the eager model itself fails: no values past this node
                return values, f"eager run failed at {node.name}: {type(e).__name__}: {e}"
            for branch in branches_of(node, _modules(flat)):
                inputs = [env[a.name] for a in operands(node)]
                sources = {branch.qualified(n): n for n in branch.compute()}
                for name, value in branch_values(branch, inputs).items():
                    _store(values, name, value, sources[name])
    return values, None


def fake_mismatches(flat: FlatProgram, values: dict[str, torch.Tensor]) -> list[FakeMismatch]:
    """The compute nodes whose eager value differs in sizes or dtype from their fake value, its symbols
    bound to the sizes of the inputs the eager run used. Such a node runs right alone and in eager code;
    compiled code that reads it trusts the fake sizes (RoBERTa's row_scale: a (..., 1) factor that its fake
    kernel calls (..., 64), broadcast as if elementwise)."""
    sizes = _symbol_sizes(flat)
    found = []
    for node in flat.graph.nodes:
        val, real = node.meta.get("val"), values.get(node.name)
        if node.op != "call_function" or not isinstance(val, torch.Tensor) or real is None:
            continue
        fake = [_size_at(s, sizes) for s in val.shape]
        if None in fake:  # a size the inputs do not determine
            continue
        if (val.dtype, fake) != (real.dtype, list(real.shape)):
            file, line = _fake_kernel_source(node.target)
            found.append(
                FakeMismatch(
                    node=node.name,
                    op=str(node.target),
                    fake=_sized(val.dtype, fake),
                    real=_shape(real),
                    file=file,
                    line=line,
                )
            )
    return found


def calls_custom_ops(flat: FlatProgram) -> bool:
    """Whether the graph calls an op of a library's own (its fake kernel written by that library's author)."""
    return any(
        node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target.namespace not in _BUILT_IN
        for node in flat.graph.nodes
    )


def _fake_kernel_source(op: object) -> tuple[str | None, int | None]:
    """Where the fake kernel of a custom op is defined: the function a `torch.library.custom_op`'s
    `register_fake` was given, else the line that registered the fake kernel (`torch.library.register_fake`)."""
    from torch._library.custom_ops import OPDEFS
    from torch._library.simple_registry import singleton

    name = getattr(op, "_schema", None) and op._schema.name  # type: ignore[attr-defined]
    fake = getattr(OPDEFS.get(name or ""), "_abstract_fn", None)
    code = getattr(inspect.unwrap(fake), "__code__", None) if fake is not None else None
    if code is not None:
        return code.co_filename, code.co_firstlineno
    try:
        source = singleton.find(name).fake_impl.kernel.source
    except AttributeError:  # a C++ registration, or a torch whose registry differs: no line to name
        return None, None
    file, _, line = str(source).rpartition(":")
    return (file, int(line)) if file and line.isdigit() else (None, None)


def _symbol_sizes(flat: FlatProgram) -> dict[sympy.Symbol, sympy.Integer]:
    """Each input size symbol of the program -> that size of the input the eager run used."""
    sizes: dict[sympy.Symbol, sympy.Integer] = {}
    for node in flat.graph.find_nodes(op="placeholder"):
        val, real = node.meta.get("val"), flat.user_inputs.get(node.name)
        if isinstance(val, torch.Tensor) and isinstance(real, torch.Tensor) and real.dim() == val.dim():
            for size, actual in zip(val.shape, real.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    sizes[size.node.expr] = sympy.Integer(int(actual))
    return sizes


def _size_at(size: int | torch.SymInt, sizes: dict[sympy.Symbol, sympy.Integer]) -> int | None:
    if not isinstance(size, torch.SymInt):
        return int(size)
    value = sympy.sympify(size.node.expr).xreplace(sizes)
    return int(value) if value.is_Integer else None


def _store(values: dict[str, torch.Tensor], name: str, value: object, node: fx.Node) -> None:
    """Keep a tensor the candidates may be fed with (not one whose size is data-dependent)."""
    if isinstance(value, torch.Tensor) and not free_unbacked_symbols(node.meta.get("val")):
        # the copy waits for the kernel, so a CUDA kernel's own fault (a user Triton kernel
        # reading out of bounds) is raised here, at the node that caused it
        values[name] = value.detach().to("cpu").clone()


def build_candidate(
    flat: FlatProgram,
    kept: set[str],
    values: dict[str, torch.Tensor],
    outputs: list[str] | None = None,
    twins: Mapping[str, torch._ops.OpOverload] | None = None,
):
    """The GraphModule, its inputs and their symbolic dims (dim_specs) for the candidate made of the
    compute nodes in `kept`; its outputs are `outputs`, by default the kept nodes that no kept node
    reads (and the extra outputs of rebuilt cond branches). The in-place nodes named in `twins` run as
    their out-of-place op, so each output is the value its node had when it ran."""
    twins = twins or {}
    compute = [n for n in flat.graph.nodes if n.op == "call_function" and n.name in kept]
    if not compute:
        raise ValueError("a candidate needs at least one compute node")
    read = [a for n in compute for a in n.all_input_nodes if a.name not in kept]
    read = list(dict.fromkeys(read))
    modules = _modules(flat)
    conds = {n.name: rebuild(branches_of(n, modules), kept) for n in compute if branches_of(n, modules)}
    subgraphs = {attr: module for rebuilt in conds.values() for attr, module in rebuilt.modules.items()}
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    inputs: list[object] = []
    fed: list[fx.Node] = []
    root = torch.nn.Module()
    for node in read:
        if node.name in flat.params:
            continue
        placeholder = graph.placeholder(node.name)
        placeholder.meta = dict(node.meta)
        env[node.name] = placeholder
        inputs.append(_input_value(node, flat, values))
    for qualified, source in (f for rebuilt in conds.values() for f in rebuilt.fed):
        placeholder = env[qualified] = graph.placeholder(fed_name(qualified))
        placeholder.meta = dict(source.meta)
        inputs.append(_concrete(qualified, source, values))
        fed.append(source)
    for node in read:
        if node.name in flat.params:
            target, kind, tensor = flat.params[node.name]
            _set_attr(root, target, subgraphs.get(node.name, placed(tensor, node_device(node))), kind)
            env[node.name] = graph.get_attr(target)
    branch_outputs = []
    made: dict[str, fx.Node] = {}  # each node's value when it ran, which a later in-place twin does not change
    for node in compute:
        if node.name in conds:
            env[node.name], extra = _cond_copy(graph, node, conds[node.name], env)
            branch_outputs += extra
        elif node.name in twins:
            args, kwargs = fx.map_arg((node.args, node.kwargs), lambda a: env[a.name])
            twin = graph.create_node("call_function", twins[node.name], args, kwargs, name=node.name)
            twin.meta = dict(node.meta)
            env[node.name] = env[node.args[0].name] = twin
        else:
            env[node.name] = graph.node_copy(node, lambda a: env[a.name])
        made[node.name] = env[node.name]
    if outputs is None:
        readers = {a.name for n in compute for a in n.all_input_nodes}
        outputs = [n.name for n in compute if n.name not in readers]
    graph.output(tuple(made[name] for name in outputs) + tuple(branch_outputs))
    gm = fx.GraphModule(root, graph)
    for node in read:  # GraphModule registers each tensor it copies as a buffer: a lifted constant stays one
        if node.name in flat.params and flat.params[node.name][1] == "constant":
            _unregister_buffer(gm, flat.params[node.name][0])
    gm.recompile()
    vals = [n.meta.get("val") for n in read if n.name not in flat.params] + [n.meta.get("val") for n in fed]
    return gm, inputs, dim_specs(vals, flat.ranges)


def _cond_copy(graph: fx.Graph, node: fx.Node, rebuilt: Rebuilt, env: dict[str, fx.Node]):
    """The cond with its rebuilt branches, taking the fed branch values as extra operands; and the
    getitems of its extra outputs, which become outputs of the candidate."""
    pred, true_fn, false_fn = (env[a.name] if isinstance(a, fx.Node) else a for a in node.args[:3])
    ops = tuple(env[a.name] for a in operands(node)) + tuple(env[q] for q, _ in rebuilt.fed)
    cond = graph.create_node(
        "call_function", node.target, (pred, true_fn, false_fn, ops), dict(node.kwargs), name=node.name
    )
    extra = [graph.call_function(operator.getitem, (cond, rebuilt.outputs + i)) for i in range(rebuilt.extra_outputs)]
    return cond, extra


@dataclass(frozen=True)
class DimSpec:
    """One symbolic dim of a candidate's input: `scale * root + offset`, root an original symbol with
    its range; with no root, a size export is left to infer (Dim.AUTO)."""

    root: str | None
    low: int = 0
    high: int | None = None
    scale: int = 1
    offset: int = 0


def dim_specs(vals: list[object], ranges: dict[str, tuple[int, int | None]]) -> list[dict[int, DimSpec] | None]:
    """The symbolic dims of the inputs whose fake values are `vals`: a dim that is an original symbol
    keeps it (so equal sizes stay equal), a linear expression of one symbol is derived from it
    (`8*s77 - 1`), any other symbolic size is left to export."""
    specs = []
    for val in vals:
        spec = {}
        for axis, size in enumerate(val.shape if isinstance(val, torch.Tensor) else ()):
            if isinstance(size, torch.SymInt):
                spec[axis] = _dim_spec(size.node.expr, ranges)
        specs.append(spec or None)
    return specs


def _dim_spec(expr: sympy.Expr, ranges: dict[str, tuple[int, int | None]]) -> DimSpec:
    if len(expr.free_symbols) != 1:
        return DimSpec(None)
    (symbol,) = expr.free_symbols
    if symbol.name not in ranges:
        return DimSpec(None)
    low, high = ranges[symbol.name]
    poly = sympy.Poly(expr, symbol)
    coeffs = poly.all_coeffs()
    if poly.degree() != 1 or not all(c.is_Integer for c in coeffs) or coeffs[0] <= 0:
        return DimSpec(None)
    return DimSpec(symbol.name, low, high, int(coeffs[0]), int(coeffs[1]))


def dynamic_shapes(specs: list[dict[int, DimSpec] | None]) -> tuple | None:
    """`dynamic_shapes` for torch.export.export: one Dim per original symbol, shared by every input."""
    roots: dict[str, Dim] = {}

    def dim(spec: DimSpec) -> object:
        if spec.root is None:
            return Dim.AUTO
        if spec.root not in roots:
            bounds = {"min": spec.low} | ({"max": spec.high} if spec.high is not None else {})
            roots[spec.root] = Dim(spec.root, **bounds)
        root = roots[spec.root]
        derived = root * spec.scale if spec.scale != 1 else root
        return derived + spec.offset if spec.offset else derived

    shapes = tuple({axis: dim(d) for axis, d in spec.items()} if spec else None for spec in specs)
    return shapes if any(shapes) else None


def probe_outputs(flat: FlatProgram, values: dict[str, torch.Tensor], twins: Mapping[str, object]) -> list[str]:
    """The nodes whose compiled values an accuracy probe compares: tensors the eager run computed (integer and
    bool ones too: a dtype Inductor changes is a divergence), except views and what an in-place op writes to
    later (their value as an output would not be the value the node had), unless the probe runs that op out of
    place (`twins`, see `out_of_place_twins`): then both the value before it and the value it writes are
    compared."""
    written = {
        a.name
        for n in flat.graph.nodes
        if n.op == "call_function" and _mutates(n) and n.name not in twins
        for a in n.all_input_nodes
    }
    return [
        n.name
        for n in flat.graph.nodes
        if n.op == "call_function"
        and n.name in values
        and n.name not in written
        and (n.name in twins or not _is_view(n))
    ]


def out_of_place_twins(flat: FlatProgram) -> dict[str, torch._ops.OpOverload]:
    """The in-place nodes an accuracy probe can run as their out-of-place op (relu_ as relu, add_ as add,
    copy_ as copy, index_put_ as index_put), by name: each writes only its first operand, which neither is a
    view nor has one taken of it, so every later reader of that operand reads the op's result instead.
    torchvision's ReLU(inplace=True) and residual `+=` are such nodes; the probe could not compare them nor
    the values they overwrite, and named a node far past the culprit (RegNet's relu: `linear`)."""
    twins: dict[str, torch._ops.OpOverload] = {}
    for node in flat.graph.nodes:
        twin = _out_of_place(node, twins) if node.op == "call_function" and _mutates(node) else None
        if twin is not None:
            twins[node.name] = twin
    return twins


def _out_of_place(node: fx.Node, twins: Mapping[str, object]) -> torch._ops.OpOverload | None:
    """`twins`: the earlier nodes run out of place; the result of one is no view (ResNet's `relu_(add_(...))`)."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None
    schema = target._schema
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    base = node.args[0] if node.args else None
    if written != [0] or not isinstance(base, fx.Node) or (_is_view(base) and base.name not in twins):
        return None
    if any(_is_view(user) for user in base.users if user is not node):
        return None
    namespace, _, name = schema.name.partition("::")
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(getattr(torch.ops, namespace), name[:-1], None)
    twin = getattr(packet, target._overloadname, None) if packet is not None else None
    if not isinstance(twin, torch._ops.OpOverload) or twin._schema.is_mutable:
        return None
    same = [a.name for a in twin._schema.arguments] == [a.name for a in schema.arguments]
    return twin if same else None


def _mutates(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _is_view(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _input_value(node: fx.Node, flat: FlatProgram, values: dict[str, torch.Tensor]) -> object:
    if node.name in flat.user_inputs:
        return flat.user_inputs[node.name]
    return _concrete(node.name, node, values)


def _concrete(name: str, node: fx.Node, values: dict[str, torch.Tensor]) -> torch.Tensor:
    """The stored value of `node` (a main-graph or branch node, by `name`), on the device it ran on."""
    if name not in values:
        raise KeyError(f"no concrete value for {name}")
    val = node.meta.get("val")
    return values[name].to(val.device if isinstance(val, torch.Tensor) else "cpu")


def _unregister_buffer(root: torch.nn.Module, target: str) -> None:
    """The buffer at `target` made a plain tensor attribute, which export lifts as a constant."""
    *path, leaf = target.split(".")
    module = root.get_submodule(".".join(path))
    tensor = module._buffers.pop(leaf)
    setattr(module, leaf, tensor)


def _set_attr(root: torch.nn.Module, target: str, tensor: object, kind: str) -> None:
    *path, leaf = target.split(".")
    module = root
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, torch.nn.Module())
        module = getattr(module, part)
    if kind == "parameter":
        assert isinstance(tensor, torch.Tensor)
        module.register_parameter(leaf, torch.nn.Parameter(tensor, requires_grad=tensor.requires_grad))
    elif kind == "buffer":
        module.register_buffer(leaf, tensor)
    elif kind == "module":
        module.add_module(leaf, tensor)
    else:
        setattr(module, leaf, tensor)
