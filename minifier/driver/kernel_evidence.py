"""Evidence from the failing kernel: the slices around its source nodes, raced as guesses. The kernel is
named by the whole graph's first compile (Inductor's provenance, the launch a run died in, the kernel whose
code generation raised) or an earlier `run`'s failure.json; a CUDA fault that names none is placed by running
the original again with blocking launches. Where an untraced call raised and the run went on to fail in a later
launch, the chains from each call that may have raised to that launch race instead."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from ..contract.signature import KernelRef
from ..exchange import worker_protocol as p
from ..exchange.provenance import (
    UntracedFailure,
    call_above,
    chain_slices,
    failing_kernel,
    kernel_slices,
    read_kernel_source,
    resolve_kernel,
    untraced_failure,
)
from ..exchange.worklog import provenance_in
from ..processes.pool import Result
from .evidence import Context, Source
from .search import Candidate
from .verdicts import raised_before_build, result_signature

LOCATE_KEY = "locate"
MAX_PIECES = 6  # pieces of the graph computed from constants alone raced on their own (smallest first)
MAX_FUSED = 24  # nodes of a fused kernel paired in `together` (pairs grow as the square)
# A CUDA fault is reported at a later synchronization, after the faulting kernel's launch has returned,
# so the launch trace of an ordinary run names no kernel. Launches that wait for their kernel report it
# at the kernel's own launch; read by CUDA when it starts, hence a worker started with it.
LAUNCH_BLOCKING = {"CUDA_LAUNCH_BLOCKING": "1"}


class KernelEvidence(Source):
    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.known = False
        # node sets a failure likely needs several of (the tester hands them to the race): each pair of a kernel
        # that failed while its nodes were fused (the index_put KeyError: none of its nodes fails alone)
        self.together: list[Candidate] = []

    def of_the_whole_graph(self, result: Result) -> list[Candidate]:
        """The slices around the kernel the whole graph's compile or run failed in, unless one is known already;
        for a CUDA fault that names no kernel, the launch-blocking run starts (its answer: `answer`)."""
        if self.known:
            return []
        _, analysis = result_signature(result)
        provenance = provenance_in(result.log)
        kernel = failing_kernel(analysis, result.log, provenance)
        if kernel is None and (untraced := untraced_failure(result.log, provenance)):
            return self.chains(untraced, provenance)
        if kernel is None and self.unplaced_cuda_fault(result):
            self.locate()
        if kernel is None and raised_before_build(result):
            return self.from_constants()
        return self.leads(kernel, provenance)

    def of_kernels_that_did_not_compile(self, result: Result) -> list[Candidate]:
        """Evidence only: Inductor raises the wrapper's compile error first, should there be one."""
        if self.known:
            return []
        provenance = provenance_in(result.log)
        return self.leads(failing_kernel(result.kernel_error, result.log, provenance), provenance)

    def leads(self, kernel: KernelRef | None, provenance: Mapping[str, list[str]]) -> list[Candidate]:
        """Slices around the failing kernel's origin, best evidence first."""
        if not self.session.options.slicing or kernel is None:
            return []
        self.known = True
        kernel = resolve_kernel(kernel, self.graph, read_kernel_source(kernel), provenance=provenance)
        if kernel.name is None and not kernel.source_nodes:
            above = [n for n in call_above(kernel, provenance) if n in self.space.order]
            self.reporter.say(
                f"the error is in the wrapper's own code ({kernel.file}:{kernel.line}), not in a kernel"
                + (f"; the call above it: {', '.join(above)}" if above else "")
            )
            found = [frozenset([n]) for n in above]
        else:
            how = "named by Inductor" if kernel.exact else "guessed from its ops"
            self.reporter.say(f"kernel {kernel.name}: source nodes {', '.join(kernel.source_nodes[:8])} ({how})")
            if kernel.exact and kernel.fused:
                fused = sorted(set(kernel.source_nodes) & set(self.space.order))[:MAX_FUSED]
                self.together += [frozenset(pair) for pair in itertools.combinations(fused, 2)]
            found = kernel_slices(kernel, self.graph)
        slices = [self.space.closure(s) for s in found]
        return list(dict.fromkeys(s for s in slices if s != self.space.whole))

    def from_constants(self) -> list[Candidate]:
        """The compile raised before any kernel, naming none: the nodes computed from the program's parameters and
        constants alone, which graph passes such as constant folding rewrite before lowering (cumsum of a lifted
        constant, pytorch/pytorch#193265), race as guesses: each connected piece of them, smallest first, then all."""
        if not self.session.options.slicing:
            return []
        param = {n.name for n in self.graph.nodes if n.kind == "param"}
        pieces: list[set[str]] = []
        for node in self.graph.nodes:  # in graph order: producers first
            if node.kind != "compute" or not all(a in param or any(a in p for p in pieces) for a in node.args):
                continue
            joined = [p for p in pieces if any(a in p for a in node.args)]
            pieces = [p for p in pieces if p not in joined] + [{node.name}.union(*joined)]
        guesses = [self.space.closure(p) for p in sorted(pieces, key=len)[:MAX_PIECES]]
        guesses.append(self.space.closure(set().union(*pieces)))
        guesses = list(dict.fromkeys(g for g in guesses if g != self.space.whole))
        if guesses:
            self.reporter.say(
                f"the compile raised before any kernel: {len(pieces)} pieces computed from constants alone race"
            )
        return guesses

    def chains(self, failure: UntracedFailure, provenance: Mapping[str, list[str]]) -> list[Candidate]:
        """The chains from each untraced call that may have raised to the launch that failed after it."""
        if not self.session.options.slicing:
            return []
        self.known = True
        self.reporter.say(
            f"an untraced call ({', '.join(failure.nodes(provenance))}) raised ({failure.raised[:100]}) before "
            f"{failure.failing.rpartition(':')[0]} failed: the chains from each to it race"
        )
        slices = [self.space.closure(s) for s in chain_slices(failure, provenance, self.graph)]
        slices = list(dict.fromkeys(s for s in slices if s != self.space.whole))
        self.together += [s for s in slices if len(s) > 1]
        return slices

    def stop(self) -> None:
        self.pool.cancel(LOCATE_KEY)

    def unplaced_cuda_fault(self, result: Result) -> bool:
        poisoned = result.kind == "crash" or (result.outcome is not None and result.outcome.poisoned)
        return self.session.options.slicing and poisoned and self.graph.device.startswith("cuda")

    def locate(self) -> None:
        """Run the original again in the background, launches blocking, to see which kernel faults. Its
        outcome is never a verdict: a bug that only shows when kernels overlap must still be seen."""
        self.reporter.say(
            "the CUDA fault names no kernel: running the original with blocking launches, "
            "beside the search, to place it"
        )
        self.pool.submit(
            p.QueryRequest(key=LOCATE_KEY, program=p.OriginalProgram(), provenance=True),
            background=True,
            env=LAUNCH_BLOCKING,
        )

    def owns(self, result: Result) -> bool:
        return result.kind == "kernel_failed" or result.query.key == LOCATE_KEY

    def answer(self, result: Result) -> list[Candidate]:
        """For the whole graph's kernels that did not compile, while its wrapper still compiles, the slices around
        the kernel that error names; for the launch-blocking run's answer, the slices around the kernel it
        placed."""
        if result.kind == "kernel_failed":
            return self.of_kernels_that_did_not_compile(result)
        provenance = provenance_in(result.log)
        kernel = failing_kernel(None, result.log, provenance)
        if kernel is None:
            self.reporter.say("the launch-blocking run placed no kernel; the search goes on")
            return []
        return self.leads(kernel, provenance)
