"""What a worker's compile leaves in its log for the verdict: Inductor's provenance (each kernel and the program's
nodes it came from), the scheduler node whose kernel code could not be generated, and the compile's times (with
stacks, on request). Imports torch lazily; used inside workers only."""

from __future__ import annotations

import contextlib
import importlib
import os
import time

from ..exchange.worklog import CODEGEN_FAILED, compiled_mark, provenance_mark, sampling_stacks


@contextlib.contextmanager
def recording_provenance():
    """Inductor's provenance tracking for one compile, written to the log as a provenance mark (kernel
    name and debug handle -> the graph nodes it came from), and AOTI's launch trace for its run (each
    kernel's name printed before and after it runs, so that the log of a run that fails or dies says
    in which kernel). Inductor keeps the map only while it compiles (a context resets it on the way out,
    also when the compile fails, which is when it is wanted), so it is read on the way out of that
    context; the mark is written before the run, which may kill the process. Caches stay on: the one
    whose hit would skip code generation (and so record nothing), Inductor's FX graph cache, never serves
    AOT compiles, and the others hold binaries (Triton's kernels, the wrapper's), whose code is still
    generated; turning them all off (force_disable_caches) would slow the original's compile, on the
    critical path of every mode."""
    import torch._inductor.config as inductor_config
    import torch._inductor.debug as debug

    resetting = getattr(debug, "reset_provenance_globals", None)
    if resetting is None or not hasattr(debug, "create_kernel_information_json"):
        yield  # a torch without provenance tracking: the op-name guesses remain
        return
    kernels: dict[str, list[str]] = {}

    @contextlib.contextmanager
    def reading_on_exit():
        with resetting():
            try:
                yield
            finally:
                for key, info in debug.create_kernel_information_json().items():
                    nodes = kernels.setdefault(key, [])
                    nodes.extend(n for n in _source_nodes(info) if n not in nodes)

    debug.reset_provenance_globals = reading_on_exit
    patches = {"trace.provenance_tracking_level": 1, "aot_inductor.debug_intermediate_value_printer": "3"}
    try:
        with inductor_config.patch(patches), recording_failed_codegen(kernels, debug):
            yield
    finally:
        debug.reset_provenance_globals = resetting
        provenance_mark(kernels)


def provenance_so_far() -> None:
    """A provenance mark of the compile still running, its code generated (recording_provenance's is written
    when it ends): the kernel that did not compile is named by the nodes it came from."""
    import torch._inductor.debug as debug

    read = getattr(debug, "create_kernel_information_json", None)
    if read is not None:
        provenance_mark({key: _source_nodes(info) for key, info in read().items()})


def _source_nodes(info: dict) -> list[str]:
    """The program's nodes a kernel came from. A graph compiled as torch.compile compiles it after AOT autograd
    (compile_fx_inner) has no pre-grad graph: its own nodes are the post-grad ones."""
    return list(info.get("pre_grad_nodes") or info.get("post_grad_nodes") or [])


@contextlib.contextmanager
def marking_compile_times():
    """Mark in the log, when a compile ends (or raises), how long it took and in which of Inductor's timers."""
    from torch._dynamo import utils as dynamo_utils

    timers = getattr(dynamo_utils, "compilation_time_metrics", {})  # a torch without them: the seconds alone
    before = {key: sum(times) for key, times in timers.items()}
    start = time.monotonic()
    try:
        with sampling_stacks(_stack_interval()):
            yield
    finally:
        compiled_mark(
            time.monotonic() - start, {key: sum(times) - before.get(key, 0.0) for key, times in timers.items()}
        )


def _stack_interval() -> float:
    """AOTI_LENS_COMPILE_STACKS=SECONDS: every SECONDS of a compile, the compiling thread's stack goes to the log.
    Inductor's timers name its phases but not a wait outside them (a subprocess, a lock, a pool that
    starts): the stacks show what a slow compile was doing, in the logs a device run sends back."""
    try:
        return max(0.0, float(os.environ.get("AOTI_LENS_COMPILE_STACKS") or 0))
    except ValueError:
        return 0.0


# The backends whose codegen_node turns one scheduler node (fused or not) into a kernel.
_CODEGEN_BACKENDS = (
    ("torch._inductor.codegen.cpp", "CppScheduling"),
    ("torch._inductor.codegen.simd", "SIMDScheduling"),
)


@contextlib.contextmanager
def recording_failed_codegen(kernels: dict[str, list[str]], debug):
    """When generating a kernel's code raises (Inductor's CPU outer-loop fusion: `KeyError: 'buf59'`,
    pytorch/pytorch#188228), the kernel has no provenance handle yet: record the graph nodes of the
    scheduler node being generated, under `<node>:codegen-failed`."""
    originals = []
    for module_name, class_name in _CODEGEN_BACKENDS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        originals.append((cls, cls.codegen_node))
        cls.codegen_node = _recording(cls.codegen_node, kernels, debug)
    try:
        yield
    finally:
        for cls, original in originals:
            cls.codegen_node = original


def _recording(codegen_node, kernels: dict[str, list[str]], debug):
    def wrapped(self, node, *args, **kwargs):
        try:
            return codegen_node(self, node, *args, **kwargs)
        except Exception:
            if not any(key.endswith(CODEGEN_FAILED) for key in kernels):
                kernels[f"{node.get_name()}:{CODEGEN_FAILED}"] = _graph_nodes_of(node, debug)
            raise

    return wrapped


def _graph_nodes_of(node, debug) -> list[str]:
    """The exported graph's nodes a scheduler node came from (Inductor's post-grad -> pre-grad map)."""
    post_to_pre = getattr(debug, "_inductor_post_to_pre_grad_nodes", {}).get("postToPre", {})
    found: list[str] = []
    for snode in node.get_nodes():
        for origin in getattr(snode.node, "origins", ()) or ():
            for name in post_to_pre.get(origin.name, [origin.name]):
                if name not in found:
                    found.append(name)
    return found
