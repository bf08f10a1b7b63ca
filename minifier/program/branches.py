"""torch.cond's branches, shrunk with the rest of the graph (imports torch; used inside workers only).

Other higher-order ops (while_loop, map, scan...) stay whole: a candidate keeps or removes the op with
its subgraphs as they are. A cond's branch nodes are nodes of the search space, named
`<subgraph>.<node>` (`true_graph_0.relu`), each needing the cond itself. In a candidate a branch
keeps its kept nodes; what a kept node reads of a removed one becomes a new operand of the cond, fed
with its concrete value (both branches take the same operands), and a removed branch output is
returned as a clone of its fed value (a branch may not return its operand itself). A kept node no
kept node reads becomes an extra output of the cond, which the other branch returns as a clone of
that node's value, so both branches keep one output signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.fx as fx

from ..exchange.worker_protocol import BRANCH_SEPARATOR

COND = torch.ops.higher_order.cond
_OPERANDS = 3  # cond(pred, true_fn, false_fn, operands)


@dataclass(frozen=True)
class Branch:
    attr: str  # the main graph's get_attr node for this subgraph
    module: fx.GraphModule

    def qualified(self, node: fx.Node) -> str:
        return f"{self.attr}{BRANCH_SEPARATOR}{node.name}"

    def compute(self) -> list[fx.Node]:
        return [n for n in self.module.graph.nodes if n.op == "call_function"]

    def outputs(self) -> list[fx.Node]:
        (returned,) = self.module.graph.find_nodes(op="output")[0].args
        return list(returned) if isinstance(returned, (tuple, list)) else [returned]


def branches_of(node: fx.Node, modules: Mapping[str, object]) -> list[Branch]:
    """The two branches of a torch.cond node (nothing for any other node)."""
    if node.op != "call_function" or node.target is not COND:
        return []
    attrs = node.args[1:_OPERANDS]
    if not all(isinstance(a, fx.Node) and isinstance(modules.get(a.name), fx.GraphModule) for a in attrs):
        return []
    return [Branch(a.name, modules[a.name]) for a in attrs]


def operands(node: fx.Node) -> list[fx.Node]:
    return list(node.args[_OPERANDS])


def branch_values(branch: Branch, inputs: list[object]) -> dict[str, object]:
    """Every value the branch computes on `inputs` (its operands' values), by qualified name; stops quietly
    at the first error (a branch not taken may not run on these values), leaving the rest uncuttable."""
    env: dict[fx.Node, object] = {}
    values: dict[str, object] = {}
    placeholders = iter(inputs)
    for node in branch.module.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            env[node] = getattr(branch.module, node.target)
        elif node.op == "call_function":
            args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: env[a])
            try:
                env[node] = values[branch.qualified(node)] = node.target(*args, **kwargs)
            except Exception:  # the values so far are still good
                break
    return values


@dataclass(frozen=True)
class Rebuilt:
    """A kept cond's new branches, the branch values it takes as new operands, how many outputs it had
    and how many it returns beyond those."""

    modules: dict[str, fx.GraphModule]
    fed: list[tuple[str, fx.Node]]
    outputs: int
    extra_outputs: int


def rebuild(branches: list[Branch], kept: set[str]) -> Rebuilt:
    kept_nodes = {b.attr: [n for n in b.compute() if b.qualified(n) in kept] for b in branches}
    fed: dict[str, fx.Node] = {}
    dead: list[tuple[str, fx.Node]] = []
    for b in branches:
        mine = set(kept_nodes[b.attr])
        read = {a for n in mine for a in n.all_input_nodes}
        for n in kept_nodes[b.attr]:
            fed.update((b.qualified(a), a) for a in n.all_input_nodes if a.op == "call_function" and a not in mine)
            if n not in read and n not in b.outputs():
                dead.append((b.qualified(n), n))
        fed.update((b.qualified(o), o) for o in b.outputs() if o.op == "call_function" and o not in mine)
    fed.update(dead)
    modules = {b.attr: _branch_module(b, set(kept_nodes[b.attr]), fed, dead) for b in branches}
    return Rebuilt(modules=modules, fed=list(fed.items()), outputs=len(branches[0].outputs()), extra_outputs=len(dead))


def fed_name(qualified: str) -> str:
    return "fed_" + qualified.replace(BRANCH_SEPARATOR, "__")


def _branch_module(
    branch: Branch, mine: set[fx.Node], fed: dict[str, fx.Node], dead: list[tuple[str, fx.Node]]
) -> fx.GraphModule:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    nodes = list(branch.module.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node)
    inputs = {}
    for qualified, source in fed.items():
        inputs[qualified] = graph.placeholder(fed_name(qualified))
        inputs[qualified].meta = dict(source.meta)

    def value(node: fx.Node) -> fx.Node:
        return env[node] if node in env else inputs[branch.qualified(node)]

    for node in nodes:
        if node.op == "get_attr" or node in mine:
            env[node] = graph.node_copy(node, value)

    def returned(qualified: str, node: fx.Node) -> fx.Node:
        if node in env:
            return env[node]
        return graph.call_function(torch.ops.aten.clone.default, (inputs[qualified],))

    outputs = [returned(branch.qualified(o), o) for o in branch.outputs()]
    outputs += [env[n] if n in mine else returned(q, n) for q, n in dead]
    graph.output(tuple(outputs))
    return fx.GraphModule(branch.module, graph)
