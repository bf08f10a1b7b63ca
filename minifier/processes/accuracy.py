"""A compiled program's results against eager's, as PyTorch's accuracy minifier compares them (fp64 reference,
tolerance, non-float values ignored in its loose mode), and per node for the accuracy probe, where a dtype, shape
or layout that differs is a divergence too. Imports torch lazily; used inside workers only."""

from __future__ import annotations


def check_accuracy(eager, compiled, args, mode: str) -> None:
    from torch._dynamo.debug_utils import AccuracyError, same_two_models

    loose = mode == "accuracy"
    matches: bool | None = None
    try:
        if _fp64_fits(eager):
            matches = same_two_models(
                eager, compiled, list(args), only_fwd=True, require_fp64=loose, ignore_non_fp=loose
            )
    except RuntimeError as e:
        if _NO_FP64 not in str(e):
            raise
    if matches is None:  # once the exception has let go of the fp64 copy it was making
        # eager's fp64 run failed or would not fit (a bf16 Llama on the GPU; a cast fp64 breaks): an fp32 run stands in
        matches = _same_as_fp32_reference(eager, compiled, list(args), loose)
    if not matches:
        raise AccuracyError("Bad accuracy detected")


def _without_dtype_asserts(eager):
    """`eager` sharing its weights, without the `_assert_tensor_metadata` checks that export puts before each dtype
    cast: they pin the half-precision dtypes, so an fp32 reference of the same graph would fail on them."""
    import torch

    check = torch.ops.aten._assert_tensor_metadata.default
    if not isinstance(eager, torch.fx.GraphModule) or all(n.target is not check for n in eager.graph.nodes):
        return eager
    graph = torch.fx.Graph()
    graph._codegen = eager.graph._codegen  # the pytree specs of its inputs and outputs
    graph.output(graph.graph_copy(eager.graph, {}))
    for node in [n for n in graph.nodes if n.target is check]:
        graph.erase_node(node)
    return torch.fx.GraphModule(eager, graph)


def _fp64_fits(eager) -> bool:
    """Whether same_two_models' fp64 reference fits the free GPU memory: it copies the model, casts the copy to fp64
    and copies that again to run it. Trying it where it cannot fit would take the memory the runs beside it use."""
    import torch

    tensors = [t for t in [*eager.parameters(), *eager.buffers()] if t.is_cuda and t.is_floating_point()]
    if not tensors:
        return True
    free, _ = torch.cuda.mem_get_info(tensors[0].device)
    return sum(t.numel() * (t.element_size() + 2 * 8) for t in tensors) < free


def _same_as_fp32_reference(eager, compiled, args: list, loose: bool) -> bool:
    """same_two_models' comparison, its high-precision reference run in fp32 (which `same` reads as fp64's). The
    fp32 weights are the only copy made (same_two_models deep-copies the model for each run): on a GPU that has no
    room even for them, eager at its own precision is the reference."""
    import torch
    import torch._dynamo.config as dynamo_config
    from torch._dynamo.debug_utils import clone_inputs_retaining_gradness
    from torch._dynamo.utils import same
    from torch.utils._pytree import tree_map

    def widen(dtype):
        return lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    expected = eager(*clone_inputs_retaining_gradness(args))
    try:
        model = _without_dtype_asserts(eager)
        weights = {k: widen(torch.float32)(v) for k, v in [*model.named_parameters(), *model.named_buffers()]}
        reference = torch.func.functional_call(model, weights, tuple(tree_map(widen(torch.float32), args)))
        widened = tree_map(widen(torch.float64), reference)
        del weights, reference
        print(f"{_NO_FP64}: the reference is eager in fp32", flush=True)
    except Exception as e:  # a reference that cannot be made is no verdict, as same_two_models' fp64 is not
        widened = None
        why = "out of memory" if isinstance(e, torch.OutOfMemoryError) else f"{type(e).__name__}: {e}"
        print(f"{_NO_FP64}, nor in fp32 ({why}): the reference is eager in its own precision", flush=True)
    actual = compiled(*clone_inputs_retaining_gradness(args))
    return same(expected, actual, widened, tol=dynamo_config.repro_tolerance, equal_nan=True, ignore_non_fp=loose)


_NO_FP64 = "Could not generate fp64 outputs"  # same_two_models, where the model cannot run in fp64


def max_abs_error(expected, actual) -> float:
    import torch
    import torch.utils._pytree as pytree

    worst = 0.0
    for a, b in zip(pytree.tree_leaves(expected), pytree.tree_leaves(actual)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.numel() and a.is_floating_point():
            worst = max(worst, float((a.detach().double() - b.detach().double().to(a.device)).abs().max()))
    return worst


def diverging(gm, inputs, names: list[str], results, mode: str) -> list[str]:
    """The probed nodes whose compiled value differs from the eager run's, in graph order (the first is where
    the failure starts): another dtype, shape or layout, floating-point values that fail the accuracy check, or
    other integer or bool values, which the loose check (`mode` "accuracy") ignores as PyTorch's does."""
    import copy

    import torch
    from torch._dynamo.debug_utils import cast_to_fp64

    with torch.no_grad():
        reference = gm(*inputs)
        try:
            fp64_model, fp64_inputs = cast_to_fp64(copy.deepcopy(gm), list(inputs))
            fp64 = fp64_model(*fp64_inputs)
        except Exception:  # as for PyTorch's check: without fp64 outputs, the fp32 run is the reference
            fp64 = reference
    loose = mode == "accuracy"
    return [name for name, ref, res, ref64 in zip(names, reference, results, fp64) if _differs(ref, res, ref64, loose)]


def _differs(ref, res, ref64, loose: bool) -> bool:
    import torch
    from torch._dynamo import config as dynamo_config
    from torch._dynamo.utils import same

    if isinstance(ref, torch.Tensor) and isinstance(res, torch.Tensor):
        if ref.dtype != res.dtype or ref.shape != res.shape or _layout(ref) != _layout(res):
            return True
        if not (ref.is_floating_point() or ref.is_complex()):
            return not loose and not torch.equal(ref, res)  # counts and masks have no tolerance
    return not same(
        ref, res, ref64, tol=dynamo_config.repro_tolerance, equal_nan=True, ignore_non_fp=loose, log_error=_quiet
    )


def _layout(t) -> tuple[int, ...]:
    """The strides that place elements (a dim of size 1 has any)."""
    return tuple(stride for size, stride in zip(t.shape, t.stride()) if size != 1)


def _quiet(*args: object, **kwargs: object) -> None:
    pass
