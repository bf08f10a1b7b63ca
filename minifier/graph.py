"""Graph surgery on the exported program (imports torch; used inside workers only).

A candidate is a set of compute-node names of the original graph. Everything a kept node reads
that is not kept becomes an input: original inputs stay inputs, parameters stay parameters (module
attributes, so Inductor still sees constants), and a removed compute node becomes a placeholder fed
with its concrete value from one eager run of the original. Outputs are the kept nodes no kept node
reads, so nothing kept is dead code. Node names are preserved so kernel origins map back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from .events import SourceLine
from .provenance import user_frame
from .worker_protocol import GraphInfo, NodeInfo

_PARAM_KINDS = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
                InputKind.CONSTANT_TENSOR: "constant"}


@dataclass
class FlatProgram:
    graph: fx.Graph
    user_inputs: dict[str, object]
    params: dict[str, tuple[str, str, torch.Tensor]]  # placeholder name -> (target, kind, tensor)


def flatten(ep: ExportedProgram) -> FlatProgram:
    args, kwargs = ep.example_inputs or ((), {})
    user_values = iter(pytree.tree_leaves((args, kwargs)))
    user_inputs: dict[str, object] = {}
    params: dict[str, tuple[str, str, torch.Tensor]] = {}
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if spec.kind == InputKind.USER_INPUT:
            user_inputs[name] = next(user_values)
        elif spec.kind in _PARAM_KINDS:
            tensor = ep.state_dict.get(spec.target)
            if tensor is None:
                tensor = ep.constants[spec.target]
            params[name] = (spec.target, _PARAM_KINDS[spec.kind], tensor)
        else:
            raise NotImplementedError(f"input {name} of kind {spec.kind.name} is not supported by the minifier")
    return FlatProgram(graph=ep.graph, user_inputs=user_inputs, params=params)


def describe(flat: FlatProgram) -> GraphInfo:
    nodes = []
    outputs: list[str] = []
    devices = set()
    for node in flat.graph.nodes:
        if node.op == "output":
            outputs = [a.name for a in node.all_input_nodes]
            continue
        info = _node_info(node, flat)
        devices.add(info.device)
        nodes.append(info)
    device = next((d for d in sorted(devices) if d != "cpu"), "cpu")
    code = _readable_graph(flat).python_code(root_module="self").src
    return GraphInfo(nodes=nodes, outputs=outputs, code=code.strip(), torch_version=torch.__version__, device=device)


def program_device(flat: FlatProgram) -> torch.device:
    """Where the program runs: the device of its first non-CPU input or parameter, else the CPU."""
    tensors = [t for t in (*flat.user_inputs.values(), *(p[2] for p in flat.params.values()))
               if isinstance(t, torch.Tensor)]
    return next((t.device for t in tensors if t.device.type != "cpu"), torch.device("cpu"))


def _node_info(node: fx.Node, flat: FlatProgram) -> NodeInfo:
    val = node.meta.get("val")
    if node.op == "placeholder":
        kind = "param" if node.name in flat.params else "input"
        target = flat.params[node.name][0] if kind == "param" else node.name
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
    )


def _op_name(node: fx.Node) -> str:
    packet = getattr(node.target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(node.target, "__name__", str(node.target))


def _shape(val: object) -> str:
    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).replace("torch.", "")
        return f"{dtype}[{', '.join(str(s) for s in val.shape)}]"
    return type(val).__name__ if val is not None else ""


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
    for name, (_, _, tensor) in flat.params.items():
        env[name] = tensor
    env.update(flat.user_inputs)
    torch.manual_seed(0)
    with torch.no_grad():
        for node in flat.graph.nodes:
            if node.op != "call_function":
                continue
            args, kwargs = pytree.tree_map_only(fx.Node, lambda a: env[a.name], (node.args, node.kwargs))
            try:
                env[node.name] = node.target(*args, **kwargs)
                if isinstance(env[node.name], torch.Tensor):
                    # the copy waits for the kernel, so a CUDA kernel's own fault (a user Triton kernel
                    # reading out of bounds) is raised here, at the node that caused it
                    values[node.name] = env[node.name].detach().to("cpu").clone()
            except Exception as e:  # the eager model itself fails: no values past this node
                return values, f"eager run failed at {node.name}: {type(e).__name__}: {e}"
    return values, None


def build_candidate(flat: FlatProgram, kept: set[str], values: dict[str, torch.Tensor],
                    outputs: list[str] | None = None):
    """The GraphModule and its inputs for the candidate made of the compute nodes in `kept`; its
    outputs are `outputs`, by default the kept nodes that no kept node reads."""
    compute = [n for n in flat.graph.nodes if n.op == "call_function" and n.name in kept]
    if not compute:
        raise ValueError("a candidate needs at least one compute node")
    read = [a for n in compute for a in n.all_input_nodes if a.name not in kept]
    read = list(dict.fromkeys(read))
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    inputs: list[object] = []
    root = torch.nn.Module()
    for node in read:
        if node.name in flat.params:
            continue
        placeholder = graph.placeholder(node.name)
        placeholder.meta = dict(node.meta)
        env[node.name] = placeholder
        inputs.append(_input_value(node, flat, values))
    for node in read:
        if node.name in flat.params:
            target, kind, tensor = flat.params[node.name]
            _set_attr(root, target, tensor, kind)
            env[node.name] = graph.get_attr(target)
    for node in compute:
        env[node.name] = graph.node_copy(node, lambda a: env[a.name])
    if outputs is None:
        readers = {a.name for n in compute for a in n.all_input_nodes}
        outputs = [n.name for n in compute if n.name not in readers]
    graph.output(tuple(env[name] for name in outputs))
    gm = fx.GraphModule(root, graph)
    gm.recompile()
    return gm, inputs


def probe_outputs(flat: FlatProgram, values: dict[str, torch.Tensor]) -> list[str]:
    """The nodes whose compiled values an accuracy probe compares: floating-point tensors the eager run
    computed, except views and what an in-place op writes to later (their value as an output would
    not be the value the node had)."""
    written = {a.name for n in flat.graph.nodes if n.op == "call_function" and _mutates(n) for a in n.all_input_nodes}
    return [n.name for n in flat.graph.nodes
            if n.op == "call_function" and n.name in values and values[n.name].is_floating_point()
            and n.name not in written and not _is_view(n)]


def _mutates(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _is_view(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _input_value(node: fx.Node, flat: FlatProgram, values: dict[str, torch.Tensor]) -> object:
    if node.name in flat.user_inputs:
        return flat.user_inputs[node.name]
    if node.name not in values:
        raise KeyError(f"no concrete value for {node.name}")
    val = node.meta.get("val")
    device = val.device if isinstance(val, torch.Tensor) else "cpu"
    return values[node.name].to(device)


def _set_attr(root: torch.nn.Module, target: str, tensor: torch.Tensor, kind: str) -> None:
    *path, leaf = target.split(".")
    module = root
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, torch.nn.Module())
        module = getattr(module, part)
    if kind == "parameter":
        module.register_parameter(leaf, torch.nn.Parameter(tensor, requires_grad=tensor.requires_grad))
    elif kind == "buffer":
        module.register_buffer(leaf, tensor)
    else:
        setattr(module, leaf, tensor)
