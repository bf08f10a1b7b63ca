"""The program's weights, held once (imports torch; used inside workers only).

Every worker loads the same .pt2. Read as torch.export.load reads it, each worker would hold its own copy of the
weights in host memory and, for a CUDA program, on the GPU: eight workers of a 13 GB model ask for 104 GB. So:
- on the host, each tensor payload is mapped from the .pt2 (copy-on-write), not read: the workers share the page
  cache's one copy;
- on the GPU, one process per GPU holds them (`hold`) and the workers there use them through CUDA IPC handles
  (`adopt`), as torch.multiprocessing shares CUDA tensors; a weight a run changes (a mutated buffer) is not
  shared: like every weight where nothing holds them, a query places it for as long as it runs (`placed`,
  `on_device`);
- a big program's packages leave their weights out of the compiled .so (no copy on disk per candidate) and run on
  the query's own tensors, handed to the loaded model without a copy (`with_weights`);
- a saved candidate holding many of the original's weights refers to them instead of copying them: each is saved
  as a one-element view of its shape (all strides 0), which `restore_referenced` (and the checkpoint's own
  script, minifier.contract.artifacts) replaces with the original's tensor of the same name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import pickle
from collections.abc import Iterator

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ..contract.archive import BIG_WEIGHTS, payloads

# From this many bytes of the original's weights on, a saved candidate refers to them (below, it holds them: a
# small repro stays one file)
REFERENCE_FROM = 64 << 20
_IN_SO = "aot_inductor.package_constants_in_so"
_STATE_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def load_mapped(path: str) -> ExportedProgram:
    """torch.export.load, its tensor payloads mapped from the file and left on the host whatever device they
    were saved from (a query places what it uses). A torch whose loader differs loads the usual way."""
    import torch.export.pt2_archive._package as package

    build = getattr(package, "_build_file_map", None)
    dtype_of = getattr(package, "deserialize_scalar_type", None)
    if build is None or dtype_of is None:
        return torch.export.load(path)
    mapped = _Mapped(path, dtype_of)

    def build_mapped(archive_reader, config, base_dir):
        rest = {k: v for k, v in config.config.items() if not mapped.has(base_dir, v)}
        found = build(archive_reader, dataclasses.replace(config, config=rest), base_dir)
        for meta in config.config.values():
            if mapped.has(base_dir, meta):
                found[meta.path_name] = mapped.tensor(base_dir, meta)
        return found

    package._build_file_map = build_mapped
    try:
        return torch.export.load(path)
    finally:
        package._build_file_map = build


class _Mapped:
    def __init__(self, path: str, dtype_of) -> None:
        self.payloads = payloads(path)
        self.dtype_of = dtype_of
        with open(path, "rb") as f:
            self.memory = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if self.payloads else None

    def has(self, base_dir: str, meta) -> bool:
        payload = self.payloads.get(_record(base_dir, meta.path_name))
        return not meta.use_pickle and meta.tensor_meta is not None and payload is not None and payload.size > 0

    def tensor(self, base_dir: str, meta) -> torch.Tensor:
        payload = self.payloads[_record(base_dir, meta.path_name)]
        dtype = self.dtype_of(meta.tensor_meta.dtype)
        count = payload.size // torch._utils._element_size(dtype)
        return torch.frombuffer(self.memory, dtype=dtype, count=count, offset=payload.offset)


def _record(base_dir: str, name: str) -> str:
    return f"{base_dir.rstrip('/')}/{name}"


def placed(value: object, device: torch.device | None) -> object:
    """`value` on `device` (the device its graph node runs on); a parameter stays a parameter."""
    if not isinstance(value, torch.Tensor) or device is None or value.device == device:
        return value
    moved = value.detach().to(device)
    if isinstance(value, torch.nn.Parameter):
        return torch.nn.Parameter(moved, requires_grad=value.requires_grad)
    return moved


def node_device(node) -> torch.device | None:
    val = node.meta.get("val")
    return val.device if isinstance(val, torch.Tensor) else None


@contextlib.contextmanager
def on_device(ep: ExportedProgram) -> Iterator[ExportedProgram]:
    """The program with each weight on the device its graph node runs on, for as long as the block runs."""
    saved: list[tuple[dict, str, object]] = []
    try:
        for name, value, device in list(_state(ep)):
            if isinstance(value, torch.Tensor) and value.device != device:
                table = ep.state_dict if name in ep.state_dict else ep.constants
                saved.append((table, name, value))
                table[name] = placed(value, device)
        yield ep
    finally:
        for table, target, value in saved:
            table[target] = value


@contextlib.contextmanager
def referring_to(ep: ExportedProgram, original: ExportedProgram) -> Iterator[ExportedProgram]:
    """While the block saves `ep`, each of its weights that the original holds under the same name, shape and
    dtype is a one-element view (nothing to write), where they take REFERENCE_FROM bytes or more."""
    tables = [(ep.state_dict, original.state_dict), (ep.constants, original.constants)]
    theirs = [
        (table, name, value)
        for table, originals in tables
        for name, value in table.items()
        if _same_tensor(value, originals.get(name))
    ]
    if sum(value.numel() * value.element_size() for _, _, value in theirs) < REFERENCE_FROM:
        theirs = []
    try:
        for table, name, value in theirs:
            table[name] = _stand_in(value)
        yield ep
    finally:
        for table, name, value in theirs:
            table[name] = value


def restore_referenced(ep: ExportedProgram, original: ExportedProgram) -> ExportedProgram:
    """`ep` (loaded) with each weight it refers to replaced by the original's."""
    for table, originals in ((ep.state_dict, original.state_dict), (ep.constants, original.constants)):
        for name, value in table.items():
            if _referenced(value):
                table[name] = originals[name]
    return ep


def _referenced(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.numel() > 1 and not any(value.stride())


def _same_tensor(value: object, original: object) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and isinstance(original, torch.Tensor)
        and value.numel() > 1
        and (value.shape, value.dtype) == (original.shape, original.dtype)
    )


def _stand_in(value: torch.Tensor) -> torch.Tensor:
    """On the host whatever the weight's device: it is replaced before anything reads it, where it loads."""
    view = torch.zeros(1, dtype=value.dtype).expand(value.shape)
    return torch.nn.Parameter(view, requires_grad=False) if isinstance(value, torch.nn.Parameter) else view


def hold(ep: ExportedProgram, path: str) -> tuple[dict[str, torch.Tensor], int]:
    """The program's GPU weights that no run changes, placed once, and their CUDA IPC handles written at `path`
    (nothing where none is on a GPU). The caller keeps the tensors alive: the handles are valid while they are."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # registers the reductions that pickle CUDA tensors as IPC handles

    mutated = set(ep.graph_signature.buffers_to_mutate.values())
    held = {
        name: value.detach().to(device)
        for name, value, device in _state(ep)
        if isinstance(value, torch.Tensor) and device.type == "cuda" and name not in mutated
    }
    if held:
        with open(path + ".tmp", "wb") as f:
            f.write(ForkingPickler.dumps(held))
        os.replace(path + ".tmp", path)
    return held, sum(t.numel() * t.element_size() for t in held.values())


def adopt(ep: ExportedProgram, flat, path: str) -> int:
    """Use the holder's weights (handles at `path`) in the program and its flattened graph (a
    minifier.program.graph.FlatProgram) instead of this process's own; how many it took."""
    import torch.multiprocessing  # noqa: F401  (the reductions that rebuild CUDA tensors from IPC handles)

    with open(path, "rb") as f:
        shared: dict[str, torch.Tensor] = pickle.load(f)
    for tensor in shared.values():  # each mapping read once here: one that does not work must not reach a query
        tensor.reshape(-1)[:1].cpu()
    for table in (ep.state_dict, ep.constants):
        for name, value in table.items():
            if name in shared:
                table[name] = _like(value, shared[name])
    for node, (target, kind, value) in flat.params.items():
        if target in shared:
            flat.params[node] = (target, kind, _like(value, shared[target]))
    return len(shared)


def _like(value: object, shared: torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.nn.Parameter):
        return torch.nn.Parameter(shared, requires_grad=value.requires_grad)
    return shared


def _state(ep: ExportedProgram) -> Iterator[tuple[str, object, torch.device]]:
    """Each parameter, buffer and tensor constant of the program, with the device its graph node runs on."""
    placeholders = {n.name: n for n in ep.graph.find_nodes(op="placeholder")}
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in _STATE_KINDS or spec.target is None:
            continue
        table = ep.state_dict if spec.target in ep.state_dict else ep.constants
        device = node_device(placeholders[spec.arg.name])
        if device is not None:
            yield spec.target, table[spec.target], device


def external(weight_bytes: int, patches: dict) -> bool:
    """Whether packages leave the weights out: a big program, on a torch that can, unless the user chose."""
    import torch._inductor.config as inductor_config

    return (
        weight_bytes >= BIG_WEIGHTS
        and _IN_SO not in patches
        and hasattr(inductor_config.aot_inductor, _IN_SO.rpartition(".")[2])
    )


def leaving_out(patches: dict) -> dict:
    """Inductor configs that build a package without its weights (loaded with `with_weights`)."""
    return {**patches, _IN_SO: False}


def with_weights(compiled, ep: ExportedProgram):
    """The loaded package given the program's own tensors (no copy: they live while the query runs); None where
    it names a constant the program does not hold (one Inductor made) or cannot take them."""
    tensors = {**ep.state_dict, **ep.constants}
    names = getattr(compiled, "get_constant_fqns", lambda: None)()
    if names is None or not hasattr(compiled, "load_constants") or any(n not in tensors for n in names):
        return None
    compiled.load_constants({n: tensors[n] for n in names}, check_full_update=True, user_managed=True)
    return compiled
