"""torch.compile's launchers (`torch._dynamo.repro.after_aot`, `...after_dynamo`): their graph as an exported
program, compiled as torch.compile compiles it (imports torch; used inside workers only).

Such a launcher holds the post-AOT-autograd graph (or Dynamo's graph, before it) as code (a `Repro` module) and
its inputs as `load_args` (saved storages, or random values where none were saved). A worker runs its definitions
once and traces the graph as after_aot does (make_fx; Dynamo's with AOT autograd's decompositions), exported with
the dims `load_args` writes as symbols dynamic: a program like an AOTI dump's, so that candidates, checkpoints and
the repro are made the same way for both. An after_aot graph's compile traces a program's module back to a flat
ATen graph of its inputs and hands it to Inductor's `compile_fx_inner`: what torch.compile runs after AOT autograd. A
Dynamo graph's goes through `compile_fx`, AOT autograd and its joint-graph passes included, as torch.compile's
Inductor backend takes it; its tensor constants stay constants (lifted by export), as AOT autograd keeps them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import types
from collections.abc import Callable, Iterator

import torch
from torch.export import ExportedProgram

from ..contract.launcher import CONFIG_MODULES, LauncherSpec, saved_inputs, symbolic_inputs


def save_graph(spec: LauncherSpec) -> None:
    """The launcher's graph saved at `spec.pt2`, unless another worker has saved it (one at a time)."""
    os.makedirs(os.path.dirname(spec.pt2), exist_ok=True)
    with open(spec.pt2 + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isfile(spec.pt2):
            return
        program = export_launcher(spec)
        torch.export.save(program, spec.pt2 + ".tmp")
        os.replace(spec.pt2 + ".tmp", spec.pt2)


def export_launcher(spec: LauncherSpec) -> ExportedProgram:
    from torch._dynamo.debug_utils import InputReader
    from torch.fx.experimental.proxy_tensor import make_fx

    definitions = _definitions(spec.path)
    reader = InputReader(save_dir=saved_inputs(spec))
    definitions.load_args(reader)
    # Dynamo's graph takes its parameters as inputs that require grad; compiled for inference, as ours are
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in reader.args)
    module = getattr(definitions, "mod", None) or definitions.Repro()
    dims = dynamic_dims(spec.path, len(args))
    mode = "symbolic" if any(dims) else "real"
    with torch.no_grad():
        graph = make_fx(module, _decompositions(spec), tracing_mode=mode)(*args)
        _constants_kept(graph, module)
        return torch.export.export(graph, args, dynamic_shapes=dims if any(dims) else None, strict=False)


def _constants_kept(graph: torch.fx.GraphModule, module: torch.nn.Module) -> None:
    """The tensors that make_fx made attributes of `graph` (`torch.tensor(0.5)` in forward, `_tensor_constant0`)
    as plain attributes, which export lifts as constants, not as the buffers a GraphModule registers them as: some
    bugs need the value to stay a constant (pytorch/pytorch#193265)."""
    own = {name for name, _ in module.named_buffers()}
    for name in [n for n in graph._buffers if n not in own]:
        value = graph._buffers.pop(name)
        setattr(graph, name, value)


def dynamic_dims(path: str, count: int) -> tuple:
    """export's dynamic_shapes for the launcher's inputs: the dims torch.compile compiled as dynamic (launcher.
    symbolic_inputs), the others static, as they were (a symbolic make_fx alone would make every dim dynamic)."""
    from torch.export import Dim

    return tuple(
        (Dim.AUTO if dims else None) if isinstance(dims, bool) else ({i: Dim.AUTO for i in dims} or None)
        for dims in symbolic_inputs(path, count)
    )


def _decompositions(spec: LauncherSpec) -> dict | None:
    """What AOT autograd decomposes before Inductor sees a graph: done here for Dynamo's graph, already done in an
    after_aot launcher's."""
    if not spec.dynamo_graph:
        return None
    from torch._inductor.decomposition import select_decomp_table

    return select_decomp_table()


def compile_graph(program: ExportedProgram, patches: dict, dynamo_graph: bool) -> Callable:
    """The program compiled as torch.compile compiles its graph, for its example inputs' sizes or, where it has
    dynamic ones, its symbolic sizes: Dynamo's graph whole (`compile_fx`), an after_aot graph after AOT autograd
    (`compile_fx_inner`); called with the program's inputs."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    args, _ = program.example_inputs or ((), {})
    with torch.no_grad(), torch._inductor.config.patch(patches):
        if dynamo_graph:  # AOT autograd finds the fake mode of symbolic values itself, as Dynamo hands them over
            return compile_fx(program.module(), symbolic_values(program) or list(args))
        with _provenance_scope():
            graph, example = traced(program, args)
            compiled = compile_fx_inner(graph, example)
    return lambda *inputs: compiled(list(inputs))


def traced(program: ExportedProgram, args: tuple) -> tuple[torch.fx.GraphModule, list]:
    """The program's module as the flat ATen graph Inductor compiles, and the inputs to compile it for: where the
    program has dynamic sizes, its inputs' symbolic values, as torch.compile compiles for dynamic shapes (the
    scripts' `traced`, minifier.contract.artifacts, does the same)."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    values = symbolic_values(program)
    if not values:
        return make_fx(program.module(), tracing_mode="real")(*args), list(args)
    with detect_fake_mode(values):
        return make_fx(program.module())(*values), values


def symbolic_values(program: ExportedProgram) -> list | None:
    """The program's user inputs as their symbolic values, where any has a dynamic size; None where none has."""
    from torch.export.graph_signature import InputKind

    users = {s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    values = [n.meta["val"] for n in program.graph.nodes if n.op == "placeholder" and n.name in users]
    return values if any(_symbolic(v) for v in values) else None


def _symbolic(value: object) -> bool:
    return isinstance(value, torch.SymInt) or (
        isinstance(value, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in value.shape)
    )


def _provenance_scope():
    """The scope of Inductor's kernel provenance that torch.compile's outer compile opens around the inner one (where
    this torch has it): what the worker reads the failing kernel's nodes from."""
    import torch._inductor.debug as debug

    scope = getattr(debug, "reset_provenance_globals", None)
    return scope() if scope is not None else contextlib.nullcontext()


def _definitions(path: str) -> types.ModuleType:
    """The launcher run as a module, not as a script (its `__main__` block would start PyTorch's minifier). What
    it sets beyond its definitions (the environment, Inductor's config) is undone: the worker applies the
    launcher's portable settings itself."""
    module = types.ModuleType("aoti_lens_after_aot_launcher")
    module.__file__ = path
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    with _settings_kept():
        exec(code, module.__dict__)
    return module


@contextlib.contextmanager
def _settings_kept() -> Iterator[None]:
    import importlib

    environment = dict(os.environ)
    configs = [importlib.import_module(name) for name in CONFIG_MODULES]
    saved = [config.get_config_copy() for config in configs]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environment)
        for config, values in zip(configs, saved):
            config.load_config(values)
