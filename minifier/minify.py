"""`aoti-minify minify`: shrink a failing exported program to a 1-minimal repro.

Round one tests, concurrently, the whole graph (the sanity check) and the kernel-origin slices;
delta debugging then shrinks the smallest failing one. Every verdict is cached by the candidate's
node set, every accepted reduction is written as a checkpoint at once, and the last one becomes
repro.py, also when the run is cancelled.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import worker_protocol as p
from .artifacts import clean_scratch, copy_repro, write_checkpoint, write_repro
from .events import CancelledEvent, CandidateEvent, CheckpointEvent, DoneEvent, StartEvent, Verdict
from .pool import Pool, Result, WorkerLost
from .provenance import kernel_slices, read_kernel_source, resolve_kernel
from .rebuild import write_standalone
from .reporter import Reporter
from .search import Candidate, Space, make_closure, minimize, smallest_failure_known
from .session import Session
from .signature import KernelRef, Signature
from .verdicts import classify, result_signature
from .worker_protocol import GraphInfo


class DoesNotFail(RuntimeError):
    """The original program does not fail (with the expected error) here."""


class ExportFailed(RuntimeError):
    """A candidate could not be exported and `--skip-export-error false` asked to stop."""


@dataclass
class Progress:
    start_nodes: int
    nodes: int
    started: float = field(default_factory=time.monotonic)
    queries: int = 0
    checkpoint: str | None = None
    checkpoint_nodes: int | None = None

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def line(self) -> str:
        return f"{self.start_nodes} -> {self.nodes} nodes, {self.queries} queries, {self.seconds:.0f} s"


class PoolOracle:
    """Tests candidates on the worker pool; no node set is ever compiled twice."""

    def __init__(self, session: Session, pool: Pool, reporter: Reporter, progress: Progress,
                 whole: Candidate) -> None:
        self.session = session
        self.whole = whole
        self.pool = pool
        self.reporter = reporter
        self.progress = progress
        self.target: Signature | None = None
        self.results: dict[Candidate, Result] = {}
        self.verdicts: dict[Candidate, Verdict] = {}
        self.retried: set[Candidate] = set()
        self.warned: set[str] = set()

    def first_failing(self, candidates: Sequence[Candidate]) -> Candidate | None:
        if not smallest_failure_known(candidates, self.verdicts):
            self.test([c for c in candidates if c not in self.verdicts],
                      stop=lambda: smallest_failure_known(candidates, self.verdicts))
        found = [c for c in candidates if self.verdicts.get(c) == "fails"]
        return self.accept(min(found, key=len)) if found else None

    def test(self, candidates: Sequence[Candidate], stop: Callable[[], bool]) -> None:
        """Run candidates concurrently until `stop()` holds after some verdict; kill the rest."""
        if not candidates:
            return
        by_key = {key_of(c): c for c in candidates}

        def on_result(result: Result) -> bool:
            self.record(by_key[result.query.key], result)
            return stop()

        self.pool.evaluate([self.query(c) for c in candidates], on_result)
        self.progress.queries = self.pool.started
        self.reporter.warn_new(self.pool.warnings, self.warned)
        retry = [c for c in candidates if self.crashed_unexpectedly(c) and c not in self.retried]
        if retry and not stop():
            self.retried.update(retry)
            self.test(retry, stop)

    def crashed_unexpectedly(self, candidate: Candidate) -> bool:
        """A worker killed from outside (OOM killer, a user's kill) must not cost the search a
        reduction: a crash is retried once unless crashing is the failure being minified."""
        result = self.results.get(candidate)
        return result is not None and result.kind == "crash" and (self.target is None or self.target.kind != "crash")

    def record(self, candidate: Candidate, result: Result) -> None:
        self.progress.queries = self.pool.started
        self.results[candidate] = result
        verdict = self.verdicts[candidate] = self.verdict(result)
        detail = _detail(result)
        self.reporter.emit(CandidateEvent(nodes=len(candidate), verdict=verdict, seconds=round(result.seconds, 2),
                                          detail=detail, queries=self.progress.queries))
        self.reporter.say(f"{self.progress.line()} | candidate of {len(candidate)} nodes: {verdict}"
                          + (f" ({detail[:120]})" if detail and verdict != "fails" else ""))
        if verdict == "export_error" and not self.session.options.skip_export_error:
            raise ExportFailed(f"a candidate of {len(candidate)} nodes cannot be exported: {detail}")

    def verdict(self, result: Result) -> Verdict:
        return classify(result, self.target, self.session.check_str)

    def reclassify(self) -> None:
        self.verdicts = {c: self.verdict(r) for c, r in self.results.items()}

    def query(self, candidate: Candidate) -> p.QueryRequest:
        key = key_of(candidate)
        save_pt2 = os.path.join(self.session.layout.candidates, f"{key}.pt2")
        if candidate == self.whole:  # the loaded program itself: no values, no re-export on the critical path
            return p.QueryRequest(key=key, original=True, save_pt2=save_pt2)
        return p.QueryRequest(key=key, kept=sorted(candidate), values_path=self.session.layout.values,
                              save_pt2=save_pt2)

    def accept(self, candidate: Candidate) -> Candidate:
        """A smaller failing graph becomes the current one and, at once, a checkpoint."""
        if len(candidate) < self.progress.nodes:
            self.progress.nodes = len(candidate)
            self.write_checkpoint(candidate)
        return candidate

    def write_checkpoint(self, candidate: Candidate) -> bool:
        outcome = self.results[candidate].outcome if candidate in self.results else None
        if outcome is None or not outcome.pt2:
            self.reporter.log(f"no saved program for the {len(candidate)}-node graph; checkpoint skipped", "warning")
            return False
        header = [f"aoti-lens checkpoint: {len(candidate)} of {self.progress.start_nodes} graph nodes",
                  f"reproduces: {self.target.describe() if self.target else 'the original failure'}"]
        path = write_checkpoint(self.session.layout, self.session.spec, self.session.accuracy, len(candidate),
                                outcome.pt2, outcome.code, header, self.session.options.imports)
        self.progress.checkpoint, self.progress.checkpoint_nodes = path, len(candidate)
        self.reporter.emit(CheckpointEvent(nodes=len(candidate), path=path, graph=outcome.code,
                                           queries=self.progress.queries, seconds=self.progress.seconds))
        self.reporter.say(f"{self.progress.line()} | checkpoint {path}")
        return True


def key_of(candidate: Candidate) -> str:
    return hashlib.sha1("\n".join(sorted(candidate)).encode()).hexdigest()[:16]


def minify(session: Session, reporter: Reporter) -> DoneEvent:
    options = session.options
    pool = session.pool(size=max(1, options.workers))
    progress: Progress | None = None
    try:
        graph = pool.call(p.DescribeRequest()).graph
        values = stored_values(session, pool, reporter)
        order = graph.compute_nodes()
        progress = Progress(start_nodes=len(order), nodes=len(order))
        args = {n.name: n.args for n in graph.nodes if n.kind == "compute"}
        space = Space(order=order, closure=make_closure(args, set(values)))
        oracle = PoolOracle(session, pool, reporter, progress, whole=space.whole)
        reporter.say(f"minifying {len(order)} nodes with {options.workers} worker(s)")
        current = first_round(session, oracle, space, graph, reporter)
        final = minimize(space, current, oracle, max_granularity=options.max_granularity)
        return finish(session, oracle, final, reporter)
    except KeyboardInterrupt:
        cancel(session, progress, reporter)
        raise
    finally:
        pool.close()
        clean_scratch(session.layout)


def stored_values(session: Session, pool: Pool, reporter: Reporter) -> list[str]:
    """Run the original eagerly once, saving every node's value for candidates to read in place of the
    nodes they drop. Without them (the eager run raised, or its worker died of it: out of memory, a
    hang past --timeout) the search still works, but removes a node only together with its users."""
    try:
        values = pool.call(p.ValuesRequest(path=session.layout.values), timeout=session.options.timeout)
    except WorkerLost as e:
        why = str(e).split("; last log lines")[0]
        values = p.ValuesStored(path=session.layout.values, stored=[],
                                error=f"the eager run that saves the graph's values lost its worker ({why})")
    if values.error:
        reporter.log(f"{values.error}; later nodes are only removed together with their users", "warning")
    return values.stored


def first_round(session: Session, oracle: PoolOracle, space: Space, graph: GraphInfo, reporter: Reporter) -> Candidate:
    """The sanity check and the kernel-origin slices, tested concurrently.

    The round ends as soon as the whole graph's failure is known and a slice fails the same way with
    no smaller slice left untested; larger slices still compiling then are cancelled."""
    full = space.whole
    saved = session.saved_failure()
    oracle.target = saved.signature if saved else None
    slices = _slices(session, graph, space, saved.kernel if saved else None)
    sanity_needed = not session.options.skip_sanity

    def settled() -> bool:
        if sanity_needed:
            if full not in oracle.results or (oracle.crashed_unexpectedly(full) and full not in oracle.retried):
                return False
            oracle.target = sanity(session, oracle, full)
            oracle.reclassify()
        return smallest_failure_known(slices, oracle.verdicts)

    oracle.test([full, *slices] if sanity_needed else slices, stop=settled)
    if sanity_needed and full not in oracle.results:
        raise DoesNotFail("the whole graph got no verdict")
    settled()
    reporter.emit(StartEvent(nodes=len(full), signature=oracle.target or Signature("Any", "any failure"),
                             graph=graph.code, workers=session.options.workers))
    reporter.say(f"target: {oracle.target.describe() if oracle.target else 'any failure'}")
    if not slices and full in oracle.results:
        _, analysis = result_signature(oracle.results[full])
        slices = _slices(session, graph, space, analysis.kernel if analysis else None)
        oracle.first_failing(slices)
    failing = [c for c, v in oracle.verdicts.items() if v == "fails"]
    return oracle.accept(min(failing, key=len)) if failing else full


def sanity(session: Session, oracle: PoolOracle, full: Candidate) -> Signature:
    result = oracle.results[full]
    signature, _ = result_signature(result)
    if signature is None:
        why = "it could not be exported" if oracle.verdicts[full] == "export_error" else "it ran without error"
        raise DoesNotFail(f"the graph does not fail here: {why}{': ' + _detail(result) if _detail(result) else ''}")
    if session.check_str and oracle.verdict(result) != "fails":
        raise DoesNotFail(f"the graph fails, but its error does not match --check-str {session.check_str!r}: "
                          f"{signature.describe()}")
    return signature


def _slices(session: Session, graph: GraphInfo, space: Space, kernel: KernelRef | None) -> list[Candidate]:
    if not session.options.slicing or kernel is None:
        return []
    kernel = resolve_kernel(kernel, graph, read_kernel_source(kernel))
    whole = space.whole
    slices = [space.closure(s) for s in kernel_slices(kernel, graph)]
    return list(dict.fromkeys(s for s in slices if s != whole))


def _detail(result: Result) -> str:
    if result.outcome is None:
        return result.detail.splitlines()[0] if result.detail else ""
    if result.outcome.error is not None:
        return result.outcome.error.signature.describe()
    return result.outcome.text.splitlines()[0] if result.outcome.text else ""


def finish(session: Session, oracle: PoolOracle, final: Candidate, reporter: Reporter) -> DoneEvent:
    progress = oracle.progress
    if progress.checkpoint_nodes != len(final) and not oracle.write_checkpoint(final):
        if progress.checkpoint is None:
            raise RuntimeError(f"no failing graph could be saved; see the worker logs in {session.layout.work}")
        reporter.log(f"the {len(final)}-node graph could not be saved; repro.py is the "
                     f"{progress.checkpoint_nodes}-node checkpoint", "warning")
    repro = write_repro(session.layout, progress.checkpoint)
    header = [f"aoti-lens repro_standalone: {len(final)} of {progress.start_nodes} graph nodes",
              f"reproduces: {oracle.target.describe() if oracle.target else 'the original failure'}"]
    standalone, fallback = write_standalone(session, oracle.pool, sorted(final), header, oracle.verdict)
    reporter.say(f"wrote {standalone}" + (f" (falls back to repro.py: {fallback})" if fallback else ""))
    if session.options.copy_to:
        reporter.say(f"copied repro to {copy_repro(session.layout, session.options.copy_to)}")
    done = DoneEvent(nodes=progress.checkpoint_nodes, repro=repro, queries=progress.queries, seconds=progress.seconds,
                     start_nodes=progress.start_nodes, signature=oracle.target)
    reporter.emit(done)
    return done


def cancel(session: Session, progress: Progress | None, reporter: Reporter) -> None:
    """Leave the best checkpoint so far as repro.py and say where it is."""
    checkpoint = progress.checkpoint if progress else None
    if checkpoint:
        write_repro(session.layout, checkpoint, stopped=True)
    reporter.emit(CancelledEvent(nodes=(progress.checkpoint_nodes or progress.nodes) if progress else 0,
                                 checkpoint=checkpoint,
                                 queries=progress.queries if progress else 0,
                                 seconds=progress.seconds if progress else 0.0))
    reporter.say(f"cancelled; best so far: {checkpoint or 'none'}")
