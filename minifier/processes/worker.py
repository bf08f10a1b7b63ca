"""A worker process: imports torch once, then compiles, loads and runs candidates on request.

Everything that can crash (Inductor, g++, the AOTI runtime, CUDA) happens here, so a segfault,
abort or hang costs only this process; the driver notices, records the verdict and starts a new
one. Forked by minifier.processes.forkserver, which has imported torch already; `serve` is its whole life.
(`python -m minifier.processes.worker FD_IN FD_OUT` is the cold start the fork server falls back to.)
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import importlib.util
import logging
import os
import re
import select
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..contract.archive import weight_bytes
from ..contract.layout import CACHES, PACKAGES
from ..contract.procs import WORKER_NAME, env_set, name_process
from ..contract.signature import ErrorAnalysis, Phase, analyze_error, first_line, kernel_ops
from ..exchange import worker_protocol as p
from ..exchange.provenance import PYBINDING_KERNEL, pybinding_name, read_kernel_source
from ..exchange.worklog import LOG_LIMIT, keep_under, phase
from . import cpp_build, cpu_isa, switches
from .accuracy import check_accuracy, diverging, max_abs_error
from .compile_marks import marking_compile_times, provenance_so_far, recording_provenance

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from ..program.graph import FlatProgram

# What a worker's first compile imports; triton only where it is installed (the GPU path).
COMPILE_MODULES = ("torch._inductor.compile_fx", "triton")
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded")
# How CUDA's and the CPU allocator's out-of-memory errors read (torch.OutOfMemoryError is only CUDA's).
_OUT_OF_MEMORY_TEXTS = ("CUDA out of memory", "can't allocate memory", "Cannot allocate memory")


class Worker:
    def __init__(
        self, isa_answer: cpu_isa.SharedAnswer | None = None, tell: Callable[[p.Reply], None] | None = None
    ) -> None:
        self.isa_answer = isa_answer  # the fork server's CPU ISA probe, where it forked this one before having it
        self.tell = tell  # a reply sent before the request's answer (KernelFailed)
        self._init: p.InitRequest | None = None
        self._ep: ExportedProgram | None = None
        self._flat: FlatProgram | None = None
        self.values: dict | None = None
        self.values_path: str | None = None
        self._defaults: dict[str, object] = {}  # Inductor's configs before the launcher's settings
        self.phase: Phase | None = None
        self.weight_bytes = 0  # the program's weights, as its .pt2 stores them
        self.held: object = None  # a holder's weights on its GPU (HoldRequest)

    # Set by the InitRequest that every worker is sent first (the pool's protocol).
    @property
    def init(self) -> p.InitRequest:
        assert self._init is not None, "the worker has not been sent its InitRequest"
        return self._init

    @property
    def ep(self) -> ExportedProgram:
        assert self._ep is not None, "the worker's program is not loaded"
        return self._ep

    @property
    def flat(self) -> FlatProgram:
        assert self._flat is not None, "the worker's program is not loaded"
        return self._flat

    def handle(self, request: p.Request) -> p.Reply:
        if isinstance(request, p.InitRequest):
            return self.start(request)
        if isinstance(request, p.DescribeRequest):
            from ..program.graph import describe

            return p.Described(graph=describe(self.flat))
        if isinstance(request, p.ValuesRequest):
            return self.store_values(request.path)
        if isinstance(request, p.FakeCheckRequest):
            return self.check_fakes()
        if isinstance(request, p.WarmRequest):
            return self.warm()
        if isinstance(request, p.HoldRequest):
            return self.hold(request.path)
        if isinstance(request, p.ShareRequest):
            return self.share(request.path)
        if isinstance(request, p.StandaloneRequest):
            return self.standalone(request)
        if isinstance(request, p.ConfigsRequest):
            values = switches.config_values()
            return p.Configs(values=values, settings=switches.user_settings(self.init.launcher, self._defaults, values))
        return self.query(request)

    def start(self, request: p.InitRequest) -> p.Reply:
        self._init = request
        compiler = _missing_compiler()
        if compiler:
            return p.WorkerFailed(code="environment", message=compiler)
        import torch

        for module in request.imports:
            try:
                importlib.import_module(module)
            except Exception as e:
                return p.WorkerFailed(code="bad_input", message=f"--import {module} failed: {type(e).__name__}: {e}")
        self._defaults = switches.config_values()  # as the fork server imported them: before the launcher's settings
        warnings = _apply_config(request.launcher)
        cpu_isa.forget_inherited(request.launcher.config_patches)
        if request.launcher.torch_version and request.launcher.torch_version != torch.__version__:
            warnings.append(
                f"the launcher was written by torch {request.launcher.torch_version}; "
                f"replaying it with torch {torch.__version__}"
            )
        weights = request.launcher.weights  # one of our checkpoints, whose weights are the original's
        if request.launcher.traced:
            failed = _save_after_aot_graph(request.launcher)
            if failed:
                return failed
        try:
            self._ep = _load_program(request.launcher.pt2)
            if weights:
                from ..program.weights import restore_referenced

                restore_referenced(self._ep, _load_program(weights))
        except Exception as e:
            return _cannot_load(weights if weights and self._ep is not None else request.launcher.pt2, e)
        self.weight_bytes = weight_bytes(weights or request.launcher.pt2)
        from ..program.graph import flatten

        try:
            self._flat = flatten(self.ep)
        except NotImplementedError as e:
            return p.WorkerFailed(code="bad_input", message=str(e))
        os.makedirs(os.path.join(request.work_dir, PACKAGES), exist_ok=True)
        return p.Ready(pid=os.getpid(), torch_version=torch.__version__, warnings=warnings)

    def store_values(self, path: str) -> p.Reply:
        import torch

        from ..program.graph import concrete_values, fake_mismatches

        phase("values", path)
        values, error = concrete_values(self.flat)
        torch.save(values, path + ".tmp")
        os.replace(path + ".tmp", path)
        return p.ValuesStored(
            path=path,
            stored=sorted(values),
            error=error,
            poisoned=_poisons_cuda(error or ""),
            mismatches=fake_mismatches(self.flat, values),
        )

    def check_fakes(self) -> p.Reply:
        from ..program.graph import calls_custom_ops, concrete_values, fake_mismatches

        try:
            if not calls_custom_ops(self.flat):  # built-in ops' fake kernels are PyTorch's own: not run for them
                return p.FakeChecked()
            phase("values", "fake kernels")
            values, _ = concrete_values(self.flat)
            return p.FakeChecked(mismatches=fake_mismatches(self.flat, values))
        except Exception as e:  # a check beside the failure: it must not become one
            return p.FakeChecked(error=f"{type(e).__name__}: {e}"[:2000])

    def warm(self) -> p.Reply:
        """The seconds of imports and first-trace set-up that a fresh worker's first candidate would pay,
        paid instead while it waits for the whole graph to compile elsewhere."""
        import torch

        from ..program.graph import program_device

        class Tiny(torch.nn.Module):
            def forward(self, x):
                return x + 1

        try:
            for module in COMPILE_MODULES:
                import_if_installed(module)
            torch.export.export(Tiny(), (torch.ones(2, device=program_device(self.flat)),))
        except Exception:  # only a head start: the first candidate meets and reports any real problem
            pass
        return p.Warmed()

    def hold(self, path: str) -> p.Reply:
        from ..program.weights import hold

        self.held, size = hold(self.ep, path)  # alive as long as this process: the others map them
        # A holder answers nothing else: the program goes, and with it the host pages the upload read
        self._ep = self._flat = None
        gc.collect()
        return p.Held(path=path, bytes=size)

    def share(self, path: str) -> p.Reply:
        from ..program.weights import adopt

        try:
            return p.Shared(adopted=adopt(self.ep, self.flat, path))
        except Exception as e:  # only memory lost: each query places the weights it reads, as without a holder
            text = f"{type(e).__name__}: {e}"
            return p.Shared(adopted=0, error=text[:1000], poisoned=_poisons_cuda(text))

    def query(self, request: p.Query) -> p.Reply:
        start = time.monotonic()
        program = request.program if isinstance(request, p.QueryRequest) else None
        kept = program.nodes if isinstance(program, p.KeptNodes) else []
        phase("query", f"{request.key} of {len(kept) or 'all'} nodes")
        try:
            if isinstance(request, p.ProbeRequest):
                return self.probe(request, start)
            with contextlib.ExitStack() as held:  # what the query placed on the GPU lives until it has answered
                return self._query(request, start, held)
        finally:
            _release_cuda_cache()

    def _query(self, request: p.QueryRequest, start: float, held: contextlib.ExitStack) -> p.Reply:
        from ..program.weights import on_device, restore_referenced

        self.phase = "export"
        try:
            source = request.program
            if isinstance(source, (p.OriginalProgram, p.SavedProgram)):
                loaded = self.ep
                if isinstance(source, p.SavedProgram):
                    loaded = restore_referenced(_load_program(source.path), self.ep)
                ep = held.enter_context(on_device(loaded))
                args, kwargs = ep.example_inputs or ((), {})
                eager = ep.module()
            elif isinstance(source, p.StandaloneScript):
                ep, args, eager = _export_script(source.path)
                kwargs = {}
            else:
                ep, args, eager = self._export_candidate(source)
                kwargs = {}
        except Exception as e:
            if out_of_memory(e):
                return _short_of_memory(request.key, start, e)
            return p.Outcome(
                key=request.key,
                status="export_error",
                seconds=time.monotonic() - start,
                text=f"{type(e).__name__}: {e}"[:4000],
            )
        package = os.path.join(self.init.work_dir, PACKAGES, f"{request.key}.pt2")
        from ..program.graph import readable_code

        code = readable_code(eager)
        # Saved before compiling: after a CUDA error the weights can no longer be copied off the GPU.
        original = self.init.launcher.pt2 if isinstance(request.program, p.OriginalProgram) else None
        saved = self._save(ep, request.save_pt2, code, original)
        own_cache = os.path.join(self.init.work_dir, CACHES, request.key) if request.own_cache else None
        trial = request.trial
        recorded = switches.Recorded() if trial.record_compile else None
        max_abs_error = None
        build = switches.Build()
        try:
            with (
                recording_provenance() if request.provenance else contextlib.nullcontext(),
                inductor_cache(own_cache),
                switches.watching_build(request.stop_at_build) as build,
                switches.switched(trial.aten_fallback, recorded, trial.failing_code),
                switches.set_up(trial.setup),
            ):
                compiled = self._compile(ep, package, trial.configs, self._early_kernel(request))
            if trial.compare:
                max_abs_error = self._compare(compiled, eager, args)
            else:
                self._run(compiled, eager, args, kwargs)
        except Exception as e:
            if disk_full(e):  # not a verdict on the candidate: nothing more can be compiled here
                raise
            if switches.stopped_unchanged(e):
                return p.Outcome(key=request.key, status="unchanged", seconds=time.monotonic() - start, code=code)
            if switches.stopped_at_build(e):
                return _passed(request.key, start, saved, code, built=True, text=switches.STOPPED_AT_BUILD)
            if out_of_memory(e):
                _remove_saved(saved)
                return _short_of_memory(request.key, start, e, code)
            text = f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"
            error = _analyzed(e, self.phase)
            poisoned = _poisons_cuda(text) or type(e).__name__ == "AcceleratorError"
            return p.Outcome(
                key=request.key,
                status="raised",
                seconds=time.monotonic() - start,
                error=error,
                text=_clip(text),
                code=code,
                pt2=saved,
                poisoned=poisoned,
                built=build.reached,
                findings=_trial_findings(recorded, max_abs_error),
            )
        finally:
            _remove(package)
        return _passed(
            request.key,
            start,
            saved,
            code,
            built=build.reached,
            findings=_trial_findings(recorded, max_abs_error),
        )

    def standalone(self, request: p.StandaloneRequest) -> p.Reply:
        from ..program.standalone import NotRebuildable, standalone_code

        try:
            code = standalone_code(self.flat, set(request.kept), self._values(request.values_path), request.exact)
        except NotRebuildable as e:
            return p.StandaloneCode(code=None, reason=str(e))
        return p.StandaloneCode(code=code)

    def probe(self, request: p.ProbeRequest, start: float) -> p.Reply:
        """Localize an accuracy failure by values: one compile of the whole graph with every probed node
        an output, each output compared with the eager fp32 and fp64 references as the accuracy check
        compares the graph's own outputs. Any error makes the probe inconclusive, never a verdict."""
        import torch

        from ..program.graph import build_candidate, dynamic_shapes, out_of_place_twins, probe_outputs

        package = os.path.join(self.init.work_dir, PACKAGES, f"{request.key}.pt2")
        try:
            values = self._values(request.values_path)
            twins = out_of_place_twins(self.flat)  # Inductor functionalizes them too: the same kernels
            names = probe_outputs(self.flat, values, twins)
            gm, inputs, dims = build_candidate(
                self.flat, set(_compute_nodes(self.flat)), values, outputs=names, twins=twins
            )
            # the original's Dims, as for every candidate: a bug of symbolic sizes alone diverges only then
            shapes = dynamic_shapes(dims)
            ep = torch.export.export(gm, tuple(inputs), dynamic_shapes=shapes, strict=self.init.export_mode == "dynamo")
            accuracy = self.init.accuracy or "accuracy"
            # just in time first, where that compiles the same sizes; what it cannot show, the package shows
            diverged = self._probe_just_in_time(ep, gm, inputs, names, accuracy) if shapes is None else []
            if not diverged:
                compiled = self._compile(ep, package)
                phase("run", "probe")
                with torch.no_grad():
                    results = compiled(*inputs)
                diverged = diverging(gm, inputs, names, results, accuracy)
        except Exception as e:
            return p.Outcome(
                key=request.key,
                status="raised",
                seconds=time.monotonic() - start,
                text=_clip(f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"),
                poisoned=_poisons_cuda(str(e)),
            )
        finally:
            _remove(package)
        compared = set(names)
        uncompared = [n for n in values if n not in compared]
        return p.Outcome(
            key=request.key,
            status="passed",
            seconds=time.monotonic() - start,
            findings=p.Divergence(diverged, uncompared),
        )

    def _probe_just_in_time(self, ep, gm, inputs, names: list[str], accuracy: str) -> list[str]:
        """The probe's nodes that diverge when Inductor compiles the program just in time: the same lowering and
        kernels as the package's, run from Python, without the C++ wrapper and AOTI runtime whose build is most of
        a small graph's compile. It specializes sizes, and a bug of the wrapper or of AOT mode alone does not
        show: none found (or its compile raised) leaves it to the package."""
        import torch

        patches = dict(self.init.launcher.config_patches)
        try:
            with torch.no_grad():
                self._enter("compile", "probe, just in time")
                with marking_compile_times():
                    self._have_isas(patches)
                    compiled = torch._inductor.compile(ep.module(), list(inputs), options=patches)
                phase("run", "probe, just in time")
                results = compiled(*inputs)
            return diverging(gm, inputs, names, results, accuracy)
        except Exception as e:
            if _poisons_cuda(str(e)):
                raise  # nothing more can run in this process: the probe is inconclusive
            print(f"the probe just in time raised, the package's probe follows: {type(e).__name__}: {e}", flush=True)
            return []

    def _values(self, path: str) -> dict:
        import torch

        if self.values is None or self.values_path != path:
            self.values = {}
            if path and os.path.exists(path):
                self.values = torch.load(path, mmap=True, weights_only=True)
            self.values_path = path
        return self.values

    def _export_candidate(self, kept: p.KeptNodes):
        import torch

        from ..program.graph import build_candidate, dynamic_shapes

        gm, inputs, dims = build_candidate(self.flat, set(kept.nodes), self._values(kept.values_path))
        strict = self.init.export_mode == "dynamo"
        ep = torch.export.export(gm, tuple(inputs), dynamic_shapes=dynamic_shapes(dims), strict=strict)
        return ep, tuple(inputs), gm

    def _early_kernel(self, request: p.QueryRequest) -> Callable[[BaseException], None] | None:
        tell = self.tell
        if not request.early_kernel or tell is None:
            return None

        def told(error: BaseException) -> None:
            if request.provenance:
                provenance_so_far()
            tell(
                p.KernelFailed(key=request.key, error=analyze_error(type(error).__name__, str(error), "compile", None))
            )

        return told

    def _compile(
        self,
        ep,
        package: str,
        configs: dict[str, object] | None = None,
        on_kernel_error: Callable[[BaseException], None] | None = None,
    ):
        from ..program.weights import external, leaving_out, with_weights

        patches = {**self.init.launcher.config_patches, **(configs or {})}
        if self.init.launcher.kind == "after_aot":
            return self._build_as_torch_compile(ep, patches)
        if not external(self.weight_bytes, patches):
            return self._build(ep, package, patches, on_kernel_error)
        compiled = with_weights(self._build(ep, package, leaving_out(patches), on_kernel_error), ep)
        if compiled is None:
            print("the package without its weights cannot take the program's own: built again with them", flush=True)
            compiled = self._build(ep, package, patches, on_kernel_error)
        return compiled

    def _build(self, ep, package: str, patches: dict, on_kernel_error: Callable[[BaseException], None] | None):
        import torch

        with torch.no_grad():
            self._enter("compile", package)
            with marking_compile_times(), cpp_build.side_by_side(on_kernel_error):
                self._have_isas(patches)
                path = torch._inductor.aoti_compile_and_package(ep, package_path=package, inductor_configs=patches)
            self._enter("load", path)
            return torch._inductor.aoti_load_package(path)

    def _build_as_torch_compile(self, ep, patches: dict):
        """No early kernel error here: the Python wrapper builds no C++ wrapper for the kernels' builds to race."""
        from ..program.after_aot import compile_graph

        self._enter("compile", "as torch.compile compiles it")
        with marking_compile_times():
            self._have_isas(patches)
            return compile_graph(ep, patches, self.init.launcher.dynamo_graph)

    def _have_isas(self, patches: dict) -> None:
        """The CPU vector ISA probe's answer before a compile (`cpu_isa.ensure`); the log says where it came from."""
        how = cpu_isa.ensure(patches, self.isa_answer)
        if how:
            print(how, flush=True)

    def _run(self, compiled, eager, args, kwargs) -> None:
        import torch

        with torch.no_grad():
            self._enter("run", "")
            if self.init.accuracy:
                check_accuracy(eager, compiled, args, self.init.accuracy)
            else:
                compiled(*args, **kwargs)
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()

    def _compare(self, compiled, eager, args) -> float:
        """Run it, check it as the accuracy check does (AccuracyError when off), and return the largest
        difference from eager over the outputs."""
        import torch

        with torch.no_grad():
            self._enter("run", "compared with eager")
            check_accuracy(eager, compiled, args, self.init.accuracy or "accuracy")
            return max_abs_error(eager(*args), compiled(*args))

    def _enter(self, step: Phase, detail: str) -> None:
        self.phase = step
        phase(step, detail)

    def _save(self, ep, path: str | None, code: str, original: str | None = None) -> str | None:
        """`ep` saved at `path`, its code beside it; the launcher's own program (`original`) is linked, not
        written again (a 13 GB model's weights would be, before its compile)."""
        if not path:
            return None
        import torch

        from ..program.weights import referring_to

        try:
            if original is None or not _linked(original, path + ".tmp"):
                with referring_to(ep, self.ep):
                    torch.export.save(ep, path + ".tmp")
            os.replace(path + ".tmp", path)
            with open(p.code_beside(path), "w", encoding="utf-8") as f:
                f.write(code)
            return path
        except Exception as e:  # a candidate we cannot save is still a valid verdict, unless the disk is full
            _remove(path + ".tmp")
            if disk_full(e):
                raise
            return None


def _linked(source: str, path: str) -> bool:
    try:
        os.link(source, path)
        return True
    except OSError:  # another file system, or one without hard links: the caller writes it
        return False


def _export_script(path: str):
    """The program a repro_standalone.py builds, exported as its main does (its settings are the
    launcher's, which this worker has applied already)."""
    import runpy

    import torch

    namespace = runpy.run_path(path, run_name="aoti_lens_standalone")
    model, inputs = namespace["Repro"](), namespace["make_inputs"]()
    ep = torch.export.export(model, inputs, dynamic_shapes=namespace["DYNAMIC_SHAPES"])
    return ep, inputs, ep.module()


def import_if_installed(module: str) -> bool:
    if importlib.util.find_spec(module) is None:
        return False
    importlib.import_module(module)
    return True


def _analyzed(error: BaseException, phase: Phase | None) -> ErrorAnalysis:
    """The error's signature and kernel. A C++ kernel of Inductor's Python wrapper (torch.compile's) is built as a
    function named `kernel`: its own name is the one the wrapper module in the traceback gives its source."""
    analysis = analyze_error(type(error).__name__, str(error), phase, raising_frame(error))
    kernel = analysis.kernel
    if kernel is None or kernel.name not in (None, PYBINDING_KERNEL) or not kernel.file:
        return analysis
    source = read_kernel_source(kernel) or ""
    wrappers = {f.filename for link in _causes(error) for f in traceback.extract_tb(link.__traceback__)}
    for wrapper in sorted(w for w in wrappers if w.endswith(".py") and os.path.isfile(w)):
        with open(wrapper, encoding="utf-8", errors="replace") as f:
            name = pybinding_name(f.read(), source)
        if name:
            return replace(analysis, kernel=replace(kernel, name=name, aten_ops=kernel_ops(name)))
    return analysis


def raising_frame(error: BaseException) -> str | None:
    """`module.function` of the innermost frame that raised `error` (its original cause, when it wraps one)."""
    while error.__cause__ is not None:
        error = error.__cause__
    tb = error.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "?")
    return f"{module}.{tb.tb_frame.f_code.co_name}"


def disk_full(error: BaseException) -> bool:
    """Whether an error, or one it was raised from, says the disk or quota is full (g++ and Inductor
    report it in their messages, Python as an OSError)."""
    return any(
        (isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT))
        or any(text in str(link) for text in _DISK_FULL_TEXTS)
        for link in _causes(error)
    )


def _disk_full_reply(error: BaseException) -> p.WorkerFailed:
    where = getattr(error, "filename", None) or f"the Inductor cache or {os.getcwd()}"
    return p.WorkerFailed(
        code="environment",
        message=f"no space left on device (or over quota) writing {where}: "
        "free some space, or pass --output-dir DIR; the checkpoints written so far are intact",
    )


def _release_cuda_cache() -> None:
    """Give the candidate's GPU memory back between candidates. After a CUDA error this raises that
    error again, which must not replace the candidate's verdict (an illegal memory access would end the run
    with an internal error); the worker is retired anyway."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass


def _poisons_cuda(text: str) -> bool:
    """After a CUDA error the process's context is unusable: the worker must not serve again."""
    return "CUDA error" in text


def _passed(key: str, start: float, saved: str | None, code: str, **found: Any) -> p.Outcome:
    _remove_saved(saved)  # only failing candidates become checkpoints
    return p.Outcome(key=key, status="passed", seconds=time.monotonic() - start, code=code, **found)


def _trial_findings(recorded: switches.Recorded | None, max_abs_error: float | None) -> p.TrialFindings | None:
    if recorded is None and max_abs_error is None:
        return None  # the query asked neither
    found = recorded or switches.Recorded()
    return p.TrialFindings(max_abs_error, found.passes, found.lowered, found.generated)


def _remove_saved(saved: str | None) -> None:
    if saved:
        _remove(saved)
        _remove(p.code_beside(saved))


def _short_of_memory(key: str, start: float, error: BaseException, code: str = "") -> p.Outcome:
    """Not a verdict: the pool runs the query again once memory frees (alone, if need be)."""
    return p.Outcome(
        key=key,
        status="out_of_memory",
        seconds=time.monotonic() - start,
        error=analyze_error(type(error).__name__, str(error), None, raising_frame(error)),
        text=_clip(f"{type(error).__name__}: {error}"),
        code=code,
    )


def out_of_memory(error: BaseException) -> bool:
    """Whether an error, or one it was raised from, is an allocation that found no GPU or host memory."""
    import torch

    return any(
        isinstance(link, (torch.OutOfMemoryError, MemoryError))
        or any(text in str(link) for text in _OUT_OF_MEMORY_TEXTS)
        for link in _causes(error)
    )


def _causes(error: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or during, each once."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _compute_nodes(flat) -> list[str]:
    return [n.name for n in flat.graph.nodes if n.op == "call_function"]


def _apply_config(launcher) -> list[str]:
    warnings = [f"skipped launcher line {s}" for s in launcher.skipped]
    for assignment in launcher.config:
        try:
            obj = importlib.import_module(assignment.module)
            *path, leaf = assignment.attr.split(".")
            for part in path:
                obj = getattr(obj, part)
            setattr(obj, leaf, assignment.value)
        except (AttributeError, ImportError, TypeError, ValueError) as e:
            warnings.append(
                f"config {assignment.module}.{assignment.attr} not applied ({type(e).__name__}: {e}); "
                "the launcher may come from another torch version"
            )
    return warnings


def _load_program(path: str):
    """torch.export.load (its weights mapped from the file: `load_mapped`), keeping the cause it only logs: it
    raises a bare "error when deserializing"."""
    from ..program.weights import load_mapped

    causes: list[BaseException] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.exc_info and record.exc_info[1] is not None:
                causes.append(record.exc_info[1])

    logger, keep = logging.getLogger("torch.export"), Keep()
    logger.addHandler(keep)
    try:
        return load_mapped(path)
    except Exception as e:
        if causes and e.__cause__ is None:
            raise e from causes[-1]
        raise
    finally:
        logger.removeHandler(keep)


def _save_after_aot_graph(launcher) -> p.WorkerFailed | None:
    """A torch.compile launcher's graph saved as a program; what stops that, said as bad input."""
    from ..program.after_aot import save_graph

    try:
        save_graph(launcher)
    except Exception as e:
        if disk_full(e):
            return _disk_full_reply(e)
        traceback.print_exc()  # the whole of it in the worker's log
        return p.WorkerFailed(
            code="bad_input",
            message=f"{launcher.path}: cannot trace the torch.compile launcher's graph: {one_line(e)}",
        )
    return None


def one_line(error: BaseException) -> str:
    """An exception in one line: its message's first, cut after the first sentence where the dispatcher goes on to
    list every backend; quantized tensors said as such (they have no fake form, which tracing needs)."""
    line = first_line(str(error))
    if line.startswith("Could not run "):
        line = line.split(". ", 1)[0] + "."
    if "Quantized" in line:
        line += " Quantized tensors have no fake-tensor form, which tracing the graph needs."
    return f"{type(error).__name__}: {line}"[:4000]


def _cannot_load(path: str, error: BaseException) -> p.WorkerFailed:
    """Why the program does not load, the usual cause first: a custom op that nothing imported here registers;
    memory that ran out is the machine's state, not the file's."""
    cause = error.__cause__ or error
    unresolved = re.search(r"failed to resolve (\S+) to an operator", str(cause))
    if unresolved:
        return p.WorkerFailed(
            code="bad_input",
            message=f"cannot load {path}: the program calls {unresolved.group(1)}, which no module imported here "
            "registers; pass --import MODULE (the editor's aoti.imports setting) naming the library that "
            "defines it",
        )
    if out_of_memory(error):
        return p.WorkerFailed(
            code="environment",
            message=f"out of memory loading {path} ({weight_bytes(path) / 2**30:.1f} GiB of weights): "
            f"{type(cause).__name__}: {str(cause)[:300]}; free GPU or host memory, or pass --workers N",
        )
    return p.WorkerFailed(
        code="bad_input",
        message=f"cannot load {path}: {type(cause).__name__}: {str(cause)[:500]} "
        "(corrupt file, or written by another torch?)",
    )


def _missing_compiler() -> str | None:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return (
            f"no C++ compiler: AOTInductor compiles a C++ wrapper for every model and `{cxx}` is not "
            "on PATH (install g++, or set CXX to a compiler)"
        )
    return None


def _clip(text: str, head: int = 16000, tail: int = 4000) -> str:
    """Keep the error's start (the message, the compiler's first errors) and the traceback's end."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


@contextlib.contextmanager
def inductor_cache(path: str | None):
    """Inductor's caches in `path` (None: where they are), removed after. Inductor reads the variable at
    each use; its precompiled headers stay in the default cache, shared."""
    if path is None:
        yield
        return
    try:
        with env_set("TORCHINDUCTOR_CACHE_DIR", path):
            yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _die_with_parent_or_driver(requests_fd: int) -> None:
    """Workers lead their own process group so a timeout can kill their compiler children too. Nobody
    kills that group if the driver or the fork server is killed outright (SIGKILL), so each worker
    watches both and goes with either, compiler children included: the driver holds the only write
    end of the request pipe, which hangs up the moment the driver is gone, even while this worker is
    busy compiling (the fork server would notice only between its imports)."""
    parent = os.getppid()
    hangup = select.poll()
    hangup.register(requests_fd, 0)  # no events asked for: poll reports a hang-up whatever the mask

    def watch() -> None:
        while os.getppid() == parent and not hangup.poll(1000):
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def serve(fd_in: int, fd_out: int, isa_answer: cpu_isa.SharedAnswer | None = None) -> None:
    """Answer the driver's requests until it closes the request pipe (or a reply says we must go)."""
    name_process(WORKER_NAME)
    _die_with_parent_or_driver(fd_in)
    keep_under(LOG_LIMIT)
    requests = os.fdopen(fd_in, "rb")
    replies = os.fdopen(fd_out, "wb", buffering=0)
    writing = threading.Lock()  # a compile's thread tells the driver things while the query runs

    def send(reply: p.Reply) -> None:
        with writing:
            replies.write(p.encode(reply))

    worker = Worker(isa_answer, send)
    for line in requests:
        try:
            reply = worker.handle(p.decode_request(line))
        except Exception as e:
            reply = (
                _disk_full_reply(e)
                if disk_full(e)
                else p.WorkerFailed(code="internal", message=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            )
        send(reply)
        phase("answered", type(reply).__name__)
        if isinstance(reply, p.WorkerFailed) or getattr(reply, "poisoned", False):
            sys.stdout.flush()
            os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
