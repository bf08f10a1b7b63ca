"""A candidate graph rewritten as plain PyTorch code: the body of repro_standalone.py (imports torch;
used inside workers only).

The code is an `nn.Module` whose forward is the candidate's FX code (ATen calls, node names kept),
its parameters and its inputs made from their recorded shapes, dtypes, strides and devices: values
written out when small, seeded random when large, and every value exact (embedded as bytes) when
asked, for failures that depend on them. The subgraphs of higher-order ops become modules of their
own. The driver (artifacts.render_standalone) wraps it with the launcher's settings and a main that
exports with the same dynamic dims, compiles, loads and runs; the worker checks that the result
raises the same failure before it is kept.
"""

from __future__ import annotations

import base64
import importlib
import math

import torch
import torch.fx as fx

from .graph import DimSpec, FlatProgram, build_candidate

INLINE_NUMEL = 16  # values written out as a list up to this many elements
EMBED_BYTES = 4 << 20  # exact values of larger tensors, as base64, up to this size
# Names the wrapper provides (render_standalone's imports), as FX's generated code uses them.
PROVIDED = {"torch", "inf", "nan", "device", "NoneType", "fx_pytree", "pytree"}

HELPERS = {
    "_attach": '''
def _attach(module, target, value, buffer=False):
    """Put a parameter, buffer, constant or submodule at its dotted name, as in the original (a tensor neither
    parameter nor buffer is a constant: export lifts it as one)."""
    *path, leaf = target.split(".")
    for part in path:
        if not hasattr(module, part):
            module.add_module(part, torch.nn.Module())
        module = getattr(module, part)
    if buffer:
        module.register_buffer(leaf, value)
    else:
        setattr(module, leaf, value)
''',
    "_strided": '''
def _strided(values, stride):
    """`values` laid out with the recorded strides."""
    return torch.empty_strided(values.shape, stride, dtype=values.dtype, device=values.device).copy_(values)
''',
    "_exact": '''
def _exact(data, dtype, shape, device):
    """Exact values, embedded because the failure depends on them."""
    import base64
    return torch.frombuffer(bytearray(base64.b64decode(data)), dtype=dtype).reshape(shape).to(device)
''',
}


class NotRebuildable(Exception):
    """The graph uses something that cannot be written as code here; the message says what."""


def standalone_code(flat: FlatProgram, kept: set[str], values: dict[str, torch.Tensor], exact: bool) -> str:
    gm, inputs, dims = build_candidate(flat, kept, values)
    writer = _Writer(exact)
    writer.module_class("Repro", gm, top=True)
    make_inputs = ["def make_inputs():", "    torch.manual_seed(1)", "    return ("]
    make_inputs += [f"        {writer.value(v)}," for v in inputs] + ["    )"]
    parts = [HELPERS[h].strip() for h in sorted(writer.helpers)]
    parts += [*writer.classes, "\n".join(make_inputs), _dims_code(dims)]
    return "\n\n\n".join([*writer.imports(), *parts]) + "\n"


class _Writer:
    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.helpers: set[str] = set()
        self.globals: dict[str, object] = {}
        self.classes: list[str] = []

    def module_class(self, name: str, gm: fx.GraphModule, top: bool = False) -> None:
        """Add the class for `gm` to `classes`, after the classes of its subgraph modules."""
        init = ["    def __init__(self):", "        super().__init__()"]
        if top:
            init.append("        torch.manual_seed(0)")
        for target, kind, value in _attributes(gm):
            self.helpers.add("_attach")
            if kind == "module":
                sub = _class_name(target)
                self.module_class(sub, value)
                init.append(f"        _attach(self, {target!r}, {sub}())")
            else:
                buffer = ", buffer=True" if kind == "buffer" else ""
                init.append(f"        _attach(self, {target!r}, {self.attribute(value, kind)}{buffer})")
        code = gm.graph.python_code(root_module="self")
        self._note_globals(code.globals)
        forward = "\n".join("    " + ln if ln.strip() else "" for ln in code.src.strip().splitlines())
        self.classes.append("\n".join([f"class {name}(torch.nn.Module):", *init, "", forward]))

    def attribute(self, value: object, kind: str) -> str:
        if kind == "parameter":
            assert isinstance(value, torch.Tensor)
            return f"torch.nn.Parameter({self.value(value)}, requires_grad={value.requires_grad})"
        return self.value(value)

    def value(self, value: object) -> str:
        if not isinstance(value, torch.Tensor):
            if isinstance(value, (bool, int, float, type(None))) and not _special(value):
                return repr(value)
            raise NotRebuildable(f"an input of type {type(value).__name__}")
        return self.tensor(value.detach())

    def tensor(self, t: torch.Tensor) -> str:
        meta = f"dtype={t.dtype}, device={str(t.device)!r}"
        shape = tuple(t.shape)
        if t.numel() == 0:
            return f"torch.empty({shape}, {meta})"
        dense = t.cpu().contiguous()
        if t.numel() <= INLINE_NUMEL:
            made = f"torch.tensor({dense.tolist()!r}, {meta})"
        elif self.exact or t.dtype == torch.bool or not (t.is_floating_point() or t.is_complex()):
            made = self._exact_or_random(dense, shape, meta, str(t.device))
        else:
            made = f"torch.randn({shape}, {meta})"
        if t.stride() != dense.stride():
            self.helpers.add("_strided")
            made = f"_strided({made}, {tuple(t.stride())})"
        return made

    def _exact_or_random(self, dense: torch.Tensor, shape: tuple, meta: str, device: str) -> str:
        """`dense` is on the CPU; `device` is where the tensor was."""
        size = dense.numel() * dense.element_size()
        if size <= EMBED_BYTES:
            self.helpers.add("_exact")
            data = base64.b64encode(dense.view(torch.uint8).numpy().tobytes()).decode()
            return f"_exact({data!r}, {dense.dtype}, {shape}, {device!r})"
        if self.exact:
            raise NotRebuildable(f"a tensor of {size} bytes is too large to embed")
        low, high = int(dense.min()), int(dense.max())  # random integers in the same range: indices stay valid
        return f"torch.randint({low}, {high + 1}, {shape}, {meta})"

    def _note_globals(self, found: dict[str, object]) -> None:
        for name, obj in found.items():
            if name not in PROVIDED:
                self.globals[name] = obj

    def imports(self) -> list[str]:
        lines = [_import_line(name, obj) for name, obj in sorted(self.globals.items())]
        return ["\n".join(lines)] if lines else []


def _attributes(gm: fx.GraphModule) -> list[tuple[str, str, object]]:
    """What the graph reads off its module, in order: (dotted target, kind, value)."""
    found = []
    for node in gm.graph.find_nodes(op="get_attr"):
        value = gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if isinstance(value, fx.GraphModule):
            kind = "module"
        elif isinstance(value, torch.nn.Parameter):
            kind = "parameter"
        elif isinstance(value, torch.Tensor):
            kind = "buffer" if _is_buffer(gm, node.target) else "constant"
        else:
            raise NotRebuildable(f"attribute {node.target} of type {type(value).__name__}")
        found.append((node.target, kind, value))
    return found


def _is_buffer(gm: fx.GraphModule, target: str) -> bool:
    *path, leaf = target.split(".")
    return leaf in gm.get_submodule(".".join(path))._buffers


def _class_name(target: str) -> str:
    return "".join(part.capitalize() for part in target.replace(".", "_").split("_")) or "Sub"


def _special(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _import_line(name: str, obj: object) -> str:
    """An import that binds `name` to `obj` in the standalone file, checked to resolve to it here."""
    if isinstance(obj, type(math)):
        return f"import {obj.__name__} as {name}" if obj.__name__ != name else f"import {name}"
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        found: object = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is obj:
            head, _, rest = qualname.partition(".")
            alias = f" as {name}" if name != head or rest else ""
            if not rest:
                return f"from {module} import {head}{alias}"
            return f"import {module}\n{name} = {module}.{qualname}"
    raise NotRebuildable(f"the graph calls {name!r} ({obj!r}), which has no importable name")


def _dims_code(specs: list[dict[int, DimSpec] | None]) -> str:
    roots: dict[str, DimSpec] = {}
    shapes = []
    for spec in specs:
        if not spec:
            shapes.append("None")
            continue
        axes = []
        for axis, dim in spec.items():
            if dim.root is None:
                axes.append(f"{axis}: Dim.AUTO")
                continue
            roots.setdefault(dim.root, dim)
            expr = f"{dim.scale} * {dim.root}" if dim.scale != 1 else dim.root
            expr += f" + {dim.offset}" if dim.offset > 0 else f" - {-dim.offset}" if dim.offset else ""
            axes.append(f"{axis}: {expr}")
        shapes.append("{" + ", ".join(axes) + "}")
    lines = ["# The original's symbolic dims, one Dim per symbol, with the original's ranges."]
    for name, dim in roots.items():
        bounds = f", min={dim.low}" + (f", max={dim.high}" if dim.high is not None else "")
        lines.append(f"{name} = Dim({name!r}{bounds})")
    if not any(s != "None" for s in shapes):
        return "DYNAMIC_SHAPES = None"
    lines.append(f"DYNAMIC_SHAPES = ({', '.join(shapes)},)")
    return "\n".join(lines)
