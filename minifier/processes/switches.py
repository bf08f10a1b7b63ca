"""Inductor switches one triage compile turns (worker side): which configs exist, an op's lowering left to
ATen, which graph passes a compile applied and which ops it lowered, and the code it generated.

Both hooks sit where PyTorch's CompilerBisector acts (torch/_inductor/compiler_bisector.py): Inductor asks
`CompilerBisector.disable_subsystem` before it lowers a built-in op (a yes falls back to the ATen kernel) and
before each graph pass it applies through GraphTransformObserver. The bisector answers by counting calls
under environment variables read once per process; a triage query wants a named op instead, in a worker that
serves other queries after it, so the switch is patched for one compile and put back.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import inspect
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..contract.launcher import LauncherSpec


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


# Configs the package's build reads besides the generated code: every AOTI, CUDA and ROCm one (flags, what is
# embedded), and those cpp.* ones the build modules name (the compiler, its flags, the vector ISA; most cpp.*
# configs only shape the generated code). The metadata is filled in by each compile itself and the output path
# names the package: neither is a choice.
_BUILD_NAMESPACES = ("aot_inductor.", "cuda.", "rocm.")
_BUILD_MODULES = ("torch._inductor.cpp_builder", "torch._inductor.cpu_vec_isa", "torch._inductor.codecache")
_NOT_CHOSEN = ("aot_inductor.metadata", "aot_inductor.output_path")
# Beside those, what each compile sets itself (packaging, the specs; its build reads them): not the user's to revert
_FILLED_IN = ("aot_inductor.package", "aot_inductor.serialized_in_spec", "aot_inductor.serialized_out_spec")


def user_settings(launcher: LauncherSpec, defaults: dict[str, object], values: dict[str, object]) -> dict[str, object]:
    """The Inductor configs the launcher sets (its assignments and the compile's patches) away from their defaults,
    each with its default: the user's own switches, a debug one of which may be what meets the bug."""
    named = [a.attr for a in launcher.config if a.module == "torch._inductor.config"] + list(launcher.config_patches)
    chosen = [name for name in dict.fromkeys(named) if name in defaults and name not in _NOT_CHOSEN + _FILLED_IN]
    return {name: defaults[name] for name in chosen if values.get(name, defaults[name]) != defaults[name]}


class UnchangedCode(Exception):
    """The compile generated the code of a program known to fail: it is stopped before the C++ compile."""


class ReachedBuild(Exception):
    """The compile reached the build of its generated code, where a failure raised before it can no longer happen."""


STOPPED_AT_BUILD = "stopped at the build of its code: the failure being minified raises before it"


def stopped_unchanged(error: BaseException) -> bool:
    """Whether `error` is UnchangedCode, as raised or as Inductor wraps it (InductorError)."""
    return _raised_for(error, UnchangedCode)


def stopped_at_build(error: BaseException) -> bool:
    """Whether `error` is ReachedBuild, as raised or as Inductor wraps it."""
    return _raised_for(error, ReachedBuild)


def _raised_for(error: BaseException, cls: type[BaseException]) -> bool:
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, cls):
            return True
        seen = getattr(seen, "inner_exception", None) or seen.__cause__ or seen.__context__
    return False


@dataclass
class Build:
    """Whether a compile reached the build of its generated code (`_at_build`)."""

    reached: bool = False


@contextlib.contextmanager
def watching_build(stop: bool) -> Iterator[Build]:
    """Inside, the yielded Build says whether the compile reached the build of its code; with `stop` it raises
    ReachedBuild there instead of building. A failure the original raises before its build (a codegen KeyError,
    a Triton kernel that does not compile) cannot come from a candidate that got that far, and a passing
    candidate's build is most of its compile."""
    build = Build()

    def reach(*code: object) -> None:
        build.reached = True
        if stop:
            raise ReachedBuild()

    with _at_build(reach):
        yield build


@contextlib.contextmanager
def _at_build(check: Callable[..., None]) -> Iterator[None]:
    """Inside, `check` is called with the generated code before a compiler builds it, and stops the build by
    raising. For a package that is `AotCodeCompiler.compile` (the wrapper, the kernels, the extern kernels, the
    device); for torch.compile it is the load of the wrapper module, whose source holds every kernel, where their
    builds start. AOTInductor's first pass on a GPU loads such a module too, to tune its kernels: not its build."""
    from torch._inductor.codecache import AotCodeCompiler
    from torch._inductor.graph import GraphLowering

    package_build = AotCodeCompiler.__dict__["compile"]
    module_load = GraphLowering.__dict__.get("_compile_to_module_lines")

    def compile(cls, graph, wrapper_code, kernel_code, serialized_extern_kernel_nodes, **kwargs):
        check(wrapper_code, kernel_code, serialized_extern_kernel_nodes, kwargs.get("device_type"))
        return package_build.__func__(cls, graph, wrapper_code, kernel_code, serialized_extern_kernel_nodes, **kwargs)

    def load(graph, wrapper_code, *args, **kwargs):
        if not graph.aot_mode:
            check(wrapper_code.value)
        return module_load(graph, wrapper_code, *args, **kwargs)

    AotCodeCompiler.compile = classmethod(compile)
    if module_load is not None:  # a torch whose wrapper module loads elsewhere: its compiles are not stopped
        GraphLowering._compile_to_module_lines = load
    try:
        yield
    finally:
        AotCodeCompiler.compile = package_build
        if module_load is not None:
            GraphLowering._compile_to_module_lines = module_load


@dataclass
class Recorded:
    """What one compile did: the graph passes it applied and the ops it lowered, by name, in order, and the
    fingerprint of the code it generated (None when it failed before generating any)."""

    passes: list[str] = field(default_factory=list)
    lowered: list[str] = field(default_factory=list)
    generated: str | None = None


@contextlib.contextmanager
def switched(aten_fallback: list[str], recorded: Recorded | None, failing_code: str | None = None) -> Iterator[None]:
    """Inside, the ops named in `aten_fallback` (`aten.relu.default`) are not lowered but run as ATen
    kernels, and `recorded` gets the passes applied and the ops lowered (after Inductor's decompositions: the
    ops a fallback can name) and the generated code's fingerprint. A compile whose code has the fingerprint
    `failing_code` raises UnchangedCode instead of compiling it: the same code fails the same way."""
    if not aten_fallback and recorded is None and failing_code is None:
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
        with observing, _fingerprinting(recorded, failing_code):
            yield
    finally:
        CompilerBisector.disable_subsystem = original


@contextlib.contextmanager
def set_up(code: str) -> Iterator[None]:
    """Inside, `code` (a workaround's, as its user runs it before compiling) has run; Inductor's lowering tables
    are as they were after it, so the worker's next compile is not the workaround's."""
    if not code:
        yield
        return
    import torch
    from torch._inductor import lowering

    named = ("lowerings", "needs_realized_inputs", "fallbacks", "layout_constraints")
    tables = [t for t in (getattr(lowering, name, None) for name in named) if t is not None]
    saved = [type(t)(t) for t in tables]
    try:
        exec(compile(code, "<workaround>", "exec"), {"torch": torch})
        yield
    finally:
        for table, before in zip(tables, saved):
            table.clear()
            table.update(before)


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


@contextlib.contextmanager
def _fingerprinting(recorded: Recorded | None, failing_code: str | None) -> Iterator[None]:
    """The fingerprint is taken where Inductor hands the generated code to its build: the wrapper and kernel
    source, the extern kernels, and the configs that build reads. A config change that
    leaves all of them as they were (a fusion limit on a one-kernel graph) cannot change the outcome."""

    def check(*code: object) -> None:
        generated = fingerprint(*code)
        if recorded is not None:
            recorded.generated = generated
        if generated == failing_code:
            raise UnchangedCode(generated)

    with _at_build(check):
        yield


def fingerprint(*code: object) -> str:
    build = _build_cpp_configs()
    configs = {
        name: value
        for name, value in config_values().items()
        if name not in _NOT_CHOSEN
        and (name.startswith(_BUILD_NAMESPACES) or (name in build if build is not None else name.startswith("cpp.")))
    }
    digest = hashlib.sha256()
    for part in (*code, json.dumps(configs, sort_keys=True, default=str)):
        digest.update(str(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:20]


@functools.cache
def _build_cpp_configs() -> frozenset[str] | None:
    """The cpp.* configs Inductor's build modules read, named in their source (the names differ between torch
    versions); None where a source cannot be read: every cpp.* config counts then."""
    names: set[str] = set()
    for module in _BUILD_MODULES:
        try:
            source = inspect.getsource(importlib.import_module(module))
        except (ImportError, OSError, TypeError):
            return None
        names.update("cpp." + name for name in re.findall(r"\bconfig\.cpp\.(\w+)", source))
    return frozenset(names)
