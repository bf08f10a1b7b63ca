"""`aoti-minify minify`: shrink a failing exported program to a 1-minimal repro.

The whole graph is tested first (the sanity check, which also names the failure and its kernel);
delta debugging (search.py) starts as soon as its verdict is known. Guesses race beside it on the
workers it leaves free: the failing kernel's source nodes (from Inductor's provenance tracking of
that first compile, or failure.json of an earlier `run`), and for an accuracy failure the nodes
around the first intermediate value that diverges (a probe: one compile with every node an output).
Each source of evidence is a module of its own (kernel_evidence.py, accuracy_probe.py), and so is the
standalone check started early (early_check.py); `PoolTester` is the search's Tester on the pool,
`Checkpointing` its Oracle. Every verdict is cached by the candidate's node set, every accepted
reduction is written as a checkpoint at once, and the last one becomes repro.py, also when the run is
cancelled.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..contract.artifacts import clean_scratch, copy_repro, write_checkpoint, write_repro
from ..contract.events import (
    CancelledEvent,
    CandidateEvent,
    CheckpointEvent,
    DoneEvent,
    StandaloneEvent,
    StartEvent,
    Verdict,
)
from ..contract.signature import Signature
from ..exchange import worker_protocol as p
from ..processes.pool import Pool, Result, WorkerLost
from . import devices
from .accuracy_probe import AccuracyProbe
from .early_check import EarlyCheck
from .evidence import Context, Evidence
from .kernel_evidence import KernelEvidence
from .rebuild import write_standalone
from .reporter import Reporter
from .search import SMALL_GRAPH, Candidate, NextRound, Race, Space, key_of, make_closure, minimize, opening_round
from .session import Session
from .verdicts import classify, one_line, raised_before_build, result_signature

OUTSIDE_SIGNALS = {"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"}


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
    done: bool = False  # `done` was emitted: repro.py is the minimal graph

    @property
    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def line(self) -> str:
        return f"{self.start_nodes} -> {self.nodes} nodes, {self.queries} queries, {self.seconds:.0f} s"


class PoolTester:
    """The search's Tester on the worker pool: no node set is ever compiled twice; answers of the evidence
    run beside the search (the kernel's, the accuracy probe's, the early standalone check's) go to their own
    piece, and the leads they bring to the race."""

    def __init__(self, context: Context, progress: Progress, mismatched: Iterable[str] = ()) -> None:
        self.session, self.pool, self.reporter = context.session, context.pool, context.reporter
        self.graph = context.graph
        self.whole = context.space.whole
        self.progress = progress
        self.target: Signature | None = None
        self.stop_at_build = False  # the target raises before its code is built: candidates stop there
        self.results: dict[Candidate, Result] = {}
        self._verdicts: dict[Candidate, Verdict] = {}
        self.priority: dict[Candidate, bool] = {}  # -> in the background
        self.by_key: dict[str, Candidate] = {}
        self.retried: set[Candidate] = set()
        self.warned: set[str] = set()
        self.found: list[Candidate] = []
        self.accuracy = AccuracyProbe(context, lambda: self._verdicts, mismatched)
        self.kernel = KernelEvidence(context)
        self.early = EarlyCheck(self.session, self.pool, self.reporter, self.standalone_header, progress.line)
        self.evidence: tuple[Evidence, ...] = (self.accuracy, self.kernel, self.early)

    # --- search.Tester -----------------------------------------------------------------------------

    @property
    def verdicts(self) -> Mapping[Candidate, Verdict]:
        return self._verdicts

    def start(self, candidate: Candidate, background: bool) -> None:
        self.priority[candidate] = background
        self.by_key[key_of(candidate)] = candidate
        self.pool.submit(self.query(candidate), background, need=self.need(candidate))

    def stop(self, candidate: Candidate) -> None:
        self.pool.cancel(key_of(candidate))

    def spare(self) -> int:
        return self.pool.spare()

    def compiling(self, candidate: Candidate) -> bool:
        return self.pool.running(key_of(candidate))

    def wait(self) -> None:
        for result in self.pool.wait(until=self.accuracy.wake_at):
            self.answer(result)
        self.progress.queries = self.pool.started
        self.reporter.warn_new(self.pool.warnings, self.warned)
        self.reporter.memory(self.pool.waiting_for_memory(), self.pool.memory_detail)

    def leads(self) -> list[Candidate]:
        found, self.found = self.found, []
        return found

    def together(self) -> list[Candidate]:
        return [*self.accuracy.shown_together(), *self.kernel.together]

    # --- answers -----------------------------------------------------------------------------------

    def answer(self, result: Result) -> None:
        for evidence in self.evidence:
            if evidence.owns(result):
                self.found += evidence.answer(result)
                return
        candidate = self.by_key[result.query.key]
        if self.crashed_unexpectedly(result) and candidate not in self.retried:
            # A worker killed from outside (OOM killer, a user's kill) must not cost the search a reduction.
            self.report(candidate, result, "crash")
            self.retried.add(candidate)
            self.pool.submit(self.query(candidate), self.priority.get(candidate, False), need=self.need(candidate))
            return
        self.record(candidate, result)
        if candidate in self.accuracy.lies:
            self.accuracy.probe_unless_lies_fail()
        if candidate == self.whole:
            self.found += self.kernel.of_the_whole_graph(result)

    def crashed_unexpectedly(self, result: Result) -> bool:
        """A worker killed from outside (the OOM killer, a user's kill) is retried once, unless crashing
        is the failure being minified; a signal the program raises itself (SIGSEGV, SIGABRT) is a verdict."""
        if result.kind != "crash" or result.signal not in OUTSIDE_SIGNALS:
            return False
        return self.target is None or self.target.kind != "crash"

    def record(self, candidate: Candidate, result: Result) -> None:
        self.results[candidate] = result
        verdict = self._verdicts[candidate] = self.verdict(result)
        self.report(candidate, result, verdict)
        if verdict == "export_error" and not self.session.options.skip_export_error:
            raise ExportFailed(f"a candidate of {len(candidate)} nodes cannot be exported: {one_line(result)}")

    def report(self, candidate: Candidate, result: Result, verdict: Verdict) -> None:
        detail = one_line(result)
        self.reporter.emit(
            CandidateEvent(
                nodes=len(candidate),
                verdict=verdict,
                seconds=round(result.seconds, 2),
                detail=detail,
                queries=self.pool.started,
            )
        )
        self.reporter.say(
            f"{self.progress.line()} | candidate of {len(candidate)} nodes: {verdict}"
            + (" (background: a guess, or a round run ahead)" if self.priority.get(candidate) else "")
            + (f" ({detail[:120]})" if detail and verdict != "fails" else "")
        )

    def verdict(self, result: Result) -> Verdict:
        return classify(result, self.target, self.session.check_str)

    def aim(self, target: Signature | None, whole: Result | None = None) -> bool:
        """The failure being minified is `target` (an earlier `run`'s, or the whole graph's `whole`): every verdict
        so far is classified again against it. True where it raises before the code is built, where candidates then
        stop."""
        self.target = target
        self.stop_at_build = whole is not None and raised_before_build(whole)
        self._verdicts = {c: self.verdict(r) for c, r in self.results.items()}
        self.accuracy.probe_unless_lies_fail()
        return self.stop_at_build

    # --- leads -------------------------------------------------------------------------------------

    def stop_guessing(self) -> None:
        """The search is over: what still runs in the background can no longer matter."""
        self.accuracy.stop()
        self.kernel.stop()

    # --- the standalone check ----------------------------------------------------------------------

    def standalone_header(self, nodes: int) -> list[str]:
        return [
            f"aoti-lens repro_standalone: {nodes} of {self.progress.start_nodes} graph nodes",
            f"reproduces: {self.target.describe() if self.target else 'the original failure'}",
        ]

    # --- candidates ---------------------------------------------------------------------------------

    def need(self, candidate: Candidate) -> int:
        """The GPU memory its query asks for. Weights a holder places count for none: no query starts on its GPU
        before it has answered."""
        return devices.need(self.graph, None if candidate == self.whole else candidate, bool(self.pool.holders))

    def query(self, candidate: Candidate) -> p.QueryRequest:
        if candidate == self.whole:
            return whole_graph_query(self.session, candidate)
        key = key_of(candidate)
        save_pt2 = os.path.join(self.session.layout.candidates, f"{key}.pt2")
        return p.QueryRequest(
            key=key,
            program=p.KeptNodes(sorted(candidate), self.session.layout.values),
            save_pt2=save_pt2,
            stop_at_build=self.stop_at_build,
        )


def whole_graph_query(session: Session, whole: Candidate) -> p.QueryRequest:
    """The loaded program itself: no values, no re-export on the critical path. Provenance names the failing
    kernel's nodes; an accuracy failure names no kernel."""
    key = key_of(whole)
    provenance = session.options.slicing and not session.accuracy
    return p.QueryRequest(
        key=key,
        program=p.OriginalProgram(),
        save_pt2=os.path.join(session.layout.candidates, f"{key}.pt2"),
        provenance=provenance,
        early_kernel=provenance,
    )


class Checkpointing:
    """The search's Oracle: the race's rounds, each smaller failing graph a checkpoint at once, each
    candidate known already reported as a cached verdict. The tester only compiles and caches; this reads its
    cache."""

    def __init__(self, context: Context, progress: Progress, race: Race, tester: PoolTester) -> None:
        self.session, self.reporter = context.session, context.reporter
        self.progress = progress
        self.race = race
        self.tester = tester

    def first_failing(
        self, candidates: Sequence[Candidate], current: Candidate, then: NextRound | None = None
    ) -> Candidate | None:
        self.report_cached(candidates)
        hit = self.race.first_failing(candidates, current, then)
        return self.accept(hit) if hit is not None else None

    def failing(self, candidates: Sequence[Candidate], current: Candidate) -> list[Candidate]:
        self.report_cached(candidates)
        if self.race.needs_several(candidates, current):
            # its complements will likely all pass and make it the result: its standalone check starts now,
            # on the worker its own compile left, not after the round (on two workers, 5 compiles in 3 waves)
            self.tester.early.start(current)
        found = self.race.failing(candidates, current)
        if found:
            self.accept(found[0])
        return found

    def expect_final(self, candidate: Candidate) -> None:
        self.race.start(candidate)  # its own compile first, on the first idle worker
        self.tester.early.start(candidate)

    def accept(self, candidate: Candidate) -> Candidate:
        """A smaller failing graph becomes the current one and, at once, a checkpoint. One the search took
        without its compile (a part of it failed) waits for the next round's, which failed itself."""
        if len(candidate) < self.progress.nodes and self.tester.verdicts.get(candidate) == "fails":
            self.progress.nodes = len(candidate)
            self.write_checkpoint(candidate)
            # a larger graph's standalone check, started beside the round a guess won meanwhile, holds a worker
            # the rounds after it need
            self.tester.early.drop_unless_for(candidate)
        return candidate

    def write_checkpoint(self, candidate: Candidate) -> bool:
        saved = _saved_program(self.tester.results[candidate]) if candidate in self.tester.results else None
        if saved is None:
            self.reporter.log(f"no saved program for the {len(candidate)}-node graph; checkpoint skipped", "warning")
            return False
        pt2, code = saved
        header = [
            f"aoti-lens checkpoint: {len(candidate)} of {self.progress.start_nodes} graph nodes",
            f"reproduces: {self.tester.target.describe() if self.tester.target else 'the original failure'}",
        ]
        path = write_checkpoint(
            self.session.layout,
            self.session.spec,
            self.session.accuracy,
            len(candidate),
            pt2,
            code,
            header,
            self.session.options.imports,
        )
        self.progress.checkpoint, self.progress.checkpoint_nodes = path, len(candidate)
        self.reporter.emit(
            CheckpointEvent(
                nodes=len(candidate),
                path=path,
                graph=code,
                queries=self.progress.queries,
                seconds=self.progress.seconds,
            )
        )
        self.reporter.say(f"{self.progress.line()} | checkpoint {path}")
        return True

    def report_cached(self, candidates: Sequence[Candidate]) -> None:
        for candidate in candidates:
            verdict = self.tester.verdicts.get(candidate)
            if verdict is not None:
                self.reporter.emit(
                    CandidateEvent(
                        nodes=len(candidate),
                        verdict=verdict,
                        seconds=0.0,
                        cached=True,
                        queries=self.progress.queries,
                    )
                )


def minify(session: Session, reporter: Reporter, pool: Pool | None = None) -> DoneEvent:
    """With `pool`, on those workers (triage goes on with them after), else on a pool of its own."""
    options = session.options
    owned = pool is None
    pool = pool or session.pool(size=max(1, options.workers))
    progress: Progress | None = None
    try:
        graph = pool.call(p.DescribeRequest()).graph
        devices.plan_gpu_memory(pool, graph, session.spec)
        order = graph.compute_nodes()
        if not options.skip_sanity:  # the whole graph needs none of the values: its query starts while they are saved
            whole = whole_graph_query(session, frozenset(order))
            pool.submit(whole, need=devices.need(graph, None, bool(pool.holders)))
        values = stored_values(session, pool, reporter)
        progress = Progress(start_nodes=len(order), nodes=len(order))
        space = Space(order=order, closure=make_closure(graph.compute_args(), set(values.stored)))
        run = MinifyRun.of(Context(session, pool, reporter, space, graph), progress, values)
        tester, race, checkpoints = run.tester, run.race, run.checkpoints
        reporter.say(f"minifying {len(order)} nodes with {options.workers} worker(s)")
        # The loose accuracy check cannot tell a wrong value that reaches the output from one that only feeds
        # a boolean mask (PyTorch's accuracy-vs-strict-accuracy parity): split into single nodes, the mask's
        # log1p alone, made an output, fails first and the search drifts to it. Halving keeps PyTorch's order
        # on the graphs the search reaches; a guess that won (the probe's widest ring on RoBERTa's lying fake
        # kernel: 4 nodes, all needed) is still split, its halves would pass.
        small = 0 if session.accuracy == "accuracy" else SMALL_GRAPH
        # the round after a half that fails is the first round from that half, --max-granularity aside
        current = first_round(
            run,
            then=lambda whole: opening_round(space, whole, max_granularity=options.max_granularity, small_graph=small),
            after=lambda half: opening_round(space, half, small_graph=small),
        )
        if options.slices_first:
            current = checkpoints.accept(race.settle_guesses(current))
        final = minimize(
            space,
            current,
            checkpoints,
            max_granularity=options.max_granularity,
            small_graph=small,
            guessed=current != tester.whole,
        )
        race.close()
        tester.stop_guessing()
        if race.implied:
            reporter.say(f"{race.implied} candidates not compiled: each is part of a graph that passed")
        return finish(run, final)
    except KeyboardInterrupt:
        if progress is None or not progress.done:  # after `done`, repro.py is the minimal graph already
            cancel(session, progress, reporter)
        raise
    finally:
        if owned:
            pool.close()
        clean_scratch(session.layout)


def stored_values(session: Session, pool: Pool, reporter: Reporter) -> p.ValuesStored:
    """Run the original eagerly once, saving every node's value for candidates to read in place of the
    nodes they drop. Without them (the eager run raised, or its worker died of it: out of memory, a
    hang past --timeout) the search still works, but removes a node only together with its users.
    A value whose sizes are not what the node's fake kernel said is reported: compiled code trusts them."""
    try:
        values = pool.call(p.ValuesRequest(path=session.layout.values), timeout=session.options.timeout)
    except WorkerLost as e:
        values = p.ValuesStored(
            path=session.layout.values,
            stored=[],
            error=f"the eager run that saves the graph's values lost its worker (worker failed on "
            f"ValuesRequest: {e.reason})",
        )
    if values.error:
        reporter.log(f"{values.error}; later nodes are only removed together with their users", "warning")
    for mismatch in values.mismatches:
        reporter.log(f"{mismatch.describe()}: compiled code that reads it trusts the fake kernel", "warning")
    return values


@dataclass(frozen=True)
class MinifyRun:
    """One minify run's parts, made together: what they all work with, the progress line, the search's Tester
    (the cache of verdicts), its race and its Oracle."""

    context: Context
    progress: Progress
    tester: PoolTester
    race: Race
    checkpoints: Checkpointing

    @classmethod
    def of(cls, context: Context, progress: Progress, values: p.ValuesStored) -> MinifyRun:
        tester = PoolTester(context, progress, [m.node for m in values.mismatches])
        race = Race(tester)
        return cls(context, progress, tester, race, Checkpointing(context, progress, race, tester))


def first_round(run: MinifyRun, then: NextRound, after: NextRound) -> Candidate:
    """The whole graph's verdict, with the guesses known before it (an earlier `run`'s kernel, the
    accuracy probe) already racing, and the search's first round (`then`) and the rounds after its candidates
    (`after`) on the workers they leave; a guess that failed meanwhile becomes the start. What runs before the
    target is known is classified again once it is."""
    session, reporter, tester, race = run.context.session, run.context.reporter, run.tester, run.race
    full = tester.whole
    saved = session.saved_failure()
    tester.aim(saved.signature if saved else None)
    if not session.options.skip_sanity:
        race.start(full)
    if saved is not None and saved.kernel is not None:
        race.race(tester.kernel.leads(saved.kernel, {}))
    race.race(tester.accuracy.lie_leads())
    probing = bool(session.accuracy) and tester.accuracy.start()
    if not session.options.skip_sanity:
        # A run-ahead must not take a core the whole graph's compile needs: its verdict and the kernel evidence
        # that names the culprit would come later. Guesses from evidence still take any spare worker.
        race.verdict(full, then, after, room=devices.room_beside_a_compile())
        if tester.aim(sanity(session, tester, full), tester.results[full]):
            reporter.say("the failure raises before the code is built: a candidate that gets there passes, unbuilt")
    if probing:  # localized by values, not by search: the probe's slices go ahead of the first round
        tester.accuracy.probe_first(race, tester.results.get(tester.whole))
    reporter.emit(
        StartEvent(
            nodes=len(full),
            signature=tester.target or Signature("Any", "any failure"),
            graph=run.context.graph.code,
            workers=session.options.workers,
        )
    )
    reporter.say(f"target: {tester.target.describe() if tester.target else 'any failure'}")
    won = race.winner(full)
    return run.checkpoints.accept(won) if won is not None else full


def sanity(session: Session, tester: PoolTester, full: Candidate) -> Signature:
    result = tester.results[full]
    signature, _ = result_signature(result)
    if signature is None:
        why = "it could not be exported" if tester.verdicts[full] == "export_error" else "it ran without error"
        raise DoesNotFail(f"the graph does not fail here: {why}{': ' + one_line(result) if one_line(result) else ''}")
    if session.check_str and tester.verdict(result) != "fails":
        raise DoesNotFail(
            f"the graph fails, but its error does not match --check-str {session.check_str!r}: {signature.describe()}"
        )
    return signature


def _saved_program(result: Result) -> tuple[str, str] | None:
    """The failing candidate's program and code, as its worker saved them before compiling; a worker
    that died running it left them beside its saved program."""
    outcome = result.outcome
    if outcome is not None:
        return (outcome.pt2, outcome.code) if outcome.pt2 else None
    pt2 = result.query.save_pt2 if isinstance(result.query, p.QueryRequest) else None
    if not pt2 or not os.path.exists(pt2):
        return None
    try:
        with open(p.code_beside(pt2), encoding="utf-8") as f:
            return pt2, f.read()
    except OSError:
        return pt2, ""


def finish(run: MinifyRun, final: Candidate) -> DoneEvent:
    session, reporter, tester, progress = run.context.session, run.context.reporter, run.tester, run.progress
    if progress.checkpoint_nodes != len(final) and not run.checkpoints.write_checkpoint(final) and progress.checkpoint:
        reporter.log(
            f"the {len(final)}-node graph could not be saved; repro.py is the "
            f"{progress.checkpoint_nodes}-node checkpoint",
            "warning",
        )
    if progress.checkpoint is None or progress.checkpoint_nodes is None:
        raise RuntimeError(f"no failing graph could be saved; see the worker logs in {session.layout.work}")
    repro = write_repro(session.layout, progress.checkpoint)
    done = DoneEvent(
        nodes=progress.checkpoint_nodes,
        repro=repro,
        queries=progress.queries,
        seconds=progress.seconds,
        start_nodes=progress.start_nodes,
        signature=tester.target,
        unreduced=nothing_removed(tester) if progress.checkpoint_nodes == progress.start_nodes else "",
    )
    reporter.emit(done)
    progress.done = True
    reporter.say(f"{progress.line()} | done: {repro}; checking repro_standalone.py")
    check_standalone(run, final)
    if session.options.copy_to:
        reporter.say(f"copied repro to {copy_repro(session.layout, session.options.copy_to)}")
    return done


_DID = {
    "passes": "passed",
    "other_failure": "failed another way",
    "crash": "crashed",
    "timeout": "timed out",
    "export_error": "could not be exported",
}


def nothing_removed(tester: PoolTester) -> str:
    """Why the search ended with the graph it started from: what every smaller candidate did instead, and the
    other error most of them raised."""
    tried = {c: v for c, v in tester.verdicts.items() if c != tester.whole}
    counts = Counter(tried.values())
    did = ", ".join(f"{n} {_DID.get(verdict, verdict)}" for verdict, n in counts.most_common())
    others = Counter(one_line(tester.results[c])[:200] for c, v in tried.items() if v == "other_failure")
    common = f"; most raised {others.most_common(1)[0][0]}" if others else ""
    return f"no smaller graph fails the same way: of {len(tried)} smaller candidates, {did or 'none ran'}{common}"


def check_standalone(run: MinifyRun, final: Candidate) -> None:
    """repro_standalone.py after `done`: the proven minimal graph is the user's at once, its plain-PyTorch form
    (usually checked beside the last round already) seconds later."""
    session, reporter, tester = run.context.session, run.context.reporter, run.tester
    started = time.monotonic()
    standalone, fallback = write_standalone(
        session,
        tester.pool,
        sorted(final),
        tester.standalone_header(len(final)),
        tester.verdict,
        checked=tester.early.result_for(final, tester.wait),
    )
    seconds = round(time.monotonic() - started, 2)
    reporter.emit(StandaloneEvent(path=standalone, fallback=fallback or "", seconds=seconds))
    reporter.say(f"wrote {standalone}" + (f" (falls back to repro.py: {fallback})" if fallback else ""))


def cancel(session: Session, progress: Progress | None, reporter: Reporter) -> None:
    """Leave the best checkpoint so far as repro.py and say where it is."""
    checkpoint = progress.checkpoint if progress else None
    if checkpoint:
        write_repro(session.layout, checkpoint, stopped=True)
    reporter.emit(
        CancelledEvent(
            nodes=(progress.checkpoint_nodes or progress.nodes) if progress else 0,
            checkpoint=checkpoint,
            queries=progress.queries if progress else 0,
            seconds=progress.seconds if progress else 0.0,
        )
    )
    reporter.say(f"cancelled; best so far: {checkpoint or 'none'}")
