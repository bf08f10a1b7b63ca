"""Inductor switches one triage compile turns (worker side): which configs exist, an op's lowering left to
ATen, and which graph passes a compile applied and which ops it lowered.

Both hooks sit where PyTorch's CompilerBisector acts (torch/_inductor/compiler_bisector.py): Inductor asks
`CompilerBisector.disable_subsystem` before it lowers a built-in op (a yes falls back to the ATen kernel) and
before each graph pass it applies through GraphTransformObserver. The bisector answers by counting calls
under environment variables read once per process; a triage query wants a named op instead, in a worker that
serves other queries after it, so the switch is patched for one compile and put back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field


def config_values() -> dict[str, object]:
    """Inductor's configs as they stand in this process (the launcher's settings applied), each a JSON
    scalar or list; configs that hold objects (custom passes, callables) cannot be a workaround's value."""
    import torch._inductor.config as inductor_config

    values = {}
    for name, value in inductor_config.get_config_copy().items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        values[name] = list(value) if isinstance(value, tuple) else value
    return values


@dataclass
class Recorded:
    """What one compile did: the graph passes it applied and the ops it lowered, by name, in order."""

    passes: list[str] = field(default_factory=list)
    lowered: list[str] = field(default_factory=list)


@contextlib.contextmanager
def switched(aten_fallback: list[str], recorded: Recorded | None) -> Iterator[None]:
    """Inside, the ops named in `aten_fallback` (`aten.relu.default`) are not lowered but run as ATen
    kernels, and `recorded` gets the passes applied and the ops lowered (after Inductor's decompositions: the
    ops a fallback can name)."""
    if not aten_fallback and recorded is None:
        yield
        return
    from torch._inductor.compiler_bisector import CompilerBisector
    from torch._inductor.virtualized import V

    fallback = set(aten_fallback)
    original = CompilerBisector.__dict__["disable_subsystem"]

    def disable_subsystem(backend, subsystem, debug_info=None) -> bool:
        if backend != "inductor":
            return False
        if subsystem == "lowerings":
            node = getattr(V.graph, "current_node", None)
            if node is None:
                return False
            if recorded is not None:
                recorded.lowered.append(str(node.target))
            return str(node.target) in fallback
        if recorded is not None and debug_info is not None:
            recorded.passes.append(str(debug_info()))
        return False

    observing = _observing_passes(recorded.passes) if recorded is not None else contextlib.nullcontext()
    CompilerBisector.disable_subsystem = staticmethod(disable_subsystem)
    try:
        with observing:
            yield
    finally:
        CompilerBisector.disable_subsystem = original


@contextlib.contextmanager
def _observing_passes(passes: list[str]) -> Iterator[None]:
    """Passes that belong to no bisector subsystem never ask the bisector: their names are taken where
    every pass asks whether `disabled_passes` names it."""
    from torch.fx.passes.graph_transform_observer import GraphTransformObserver

    check = GraphTransformObserver.__dict__.get("_check_disable_pass")
    if check is None:  # a torch without the per-pass switch: no pass can be named
        yield
        return

    def recording(self) -> bool:
        if self.subsystem is None:
            passes.append(self.passname)
        return check(self)

    GraphTransformObserver._check_disable_pass = recording
    try:
        yield
    finally:
        GraphTransformObserver._check_disable_pass = check
