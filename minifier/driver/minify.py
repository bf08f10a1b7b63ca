"""`aoti-minify minify`: shrink a failing exported program to a 1-minimal repro.

The whole graph is tested first (the sanity check, which also names the failure and its kernel);
delta debugging (search.py) starts as soon as its verdict is known. Guesses race beside it on the
workers it leaves free: the failing kernel's source nodes (from Inductor's provenance tracking of
that first compile, or failure.json of an earlier `run`), and for an accuracy failure the nodes
around the first intermediate value that diverges (a probe: one compile with every node an output).
Every verdict is cached by the candidate's node set, every accepted reduction is written as a
checkpoint at once, and the last one becomes repro.py, also when the run is cancelled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..contract.artifacts import clean_scratch, copy_repro, write_checkpoint, write_repro
from ..contract.events import CancelledEvent, CandidateEvent, CheckpointEvent, DoneEvent, StartEvent, Verdict
from ..contract.signature import KernelRef, Signature
from ..exchange import worker_protocol as p
from ..exchange.provenance import failing_kernel, kernel_slices, read_kernel_source, resolve_kernel
from ..exchange.worker_protocol import GraphInfo
from ..exchange.worklog import provenance_in
from ..processes.pool import Pool, Result, WorkerLost
from .early_check import EarlyCheck
from .rebuild import write_standalone
from .reporter import Reporter
from .search import SMALL_GRAPH, Candidate, NextRound, Race, Space, key_of, make_closure, minimize, opening_round
from .session import Session
from .verdicts import classify, result_signature

PROBE_KEY = "probe"
LOCATE_KEY = "locate"
# A CUDA fault is reported at a later synchronization, after the faulting kernel's launch has returned,
# so the launch trace of an ordinary run names no kernel. Launches that wait for their kernel report it
# at the kernel's own launch; read by CUDA when it starts, hence a worker started with it.
LAUNCH_BLOCKING = {"CUDA_LAUNCH_BLOCKING": "1"}
OUTSIDE_SIGNALS = {"SIGKILL", "SIGTERM", "SIGINT", "SIGHUP"}
MAX_PROBE_LEADS = 3  # slices around the first diverging node, widening
PROBE_GRACE = 5.0  # seconds the first round waits for the probe after the whole graph's verdict, at least


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
    """The search's Tester on the worker pool: no node set is ever compiled twice, and each answer
    may bring leads (the kernel's source nodes, diverging values) for the race."""

    def __init__(
        self,
        session: Session,
        pool: Pool,
        reporter: Reporter,
        progress: Progress,
        space: Space,
        graph: GraphInfo,
        mismatched: Iterable[str] = (),
    ) -> None:
        self.session = session
        self.space = space
        self.whole = space.whole
        self.graph = graph
        self.pool = pool
        self.reporter = reporter
        self.progress = progress
        self.target: Signature | None = None
        self.results: dict[Candidate, Result] = {}
        self._verdicts: dict[Candidate, Verdict] = {}
        self.priority: dict[Candidate, bool] = {}  # -> in the background
        self.by_key: dict[str, Candidate] = {}
        self.retried: set[Candidate] = set()
        self.warned: set[str] = set()
        self.found: list[Candidate] = []
        self.probed: list[Candidate] | None = None  # the accuracy probe's slices, once it answered
        self.mismatched = set(mismatched)  # nodes whose fake kernel gives other sizes than the op
        self.lies: list[Candidate] = []  # slices that show a lying fake kernel, raced before the probe
        self.probe_waits = False  # the probe starts once no slice of a lie can fail
        self.wake_at: float | None = None  # a wait returns by then (monotonic), answered or not
        self.kernel_known = False
        self.early = EarlyCheck(session, pool, reporter, self.standalone_header, progress.line)

    # --- search.Tester -----------------------------------------------------------------------------

    @property
    def verdicts(self) -> Mapping[Candidate, Verdict]:
        return self._verdicts

    def start(self, candidate: Candidate, background: bool) -> None:
        self.priority[candidate] = background
        self.by_key[key_of(candidate)] = candidate
        self.pool.submit(self.query(candidate), background)

    def stop(self, candidate: Candidate) -> None:
        self.pool.cancel(key_of(candidate))

    def spare(self) -> int:
        return self.pool.spare()

    def compiling(self, candidate: Candidate) -> bool:
        return self.pool.running(key_of(candidate))

    def wait(self) -> None:
        for result in self.pool.wait(until=self.wake_at):
            self.answer(result)
        self.progress.queries = self.pool.started
        self.reporter.warn_new(self.pool.warnings, self.warned)

    def leads(self) -> list[Candidate]:
        found, self.found = self.found, []
        return found

    # --- answers -----------------------------------------------------------------------------------

    def answer(self, result: Result) -> None:
        if result.query.key == PROBE_KEY:
            # Its slices race at once: on two workers the probe's answer frees the worker that the round run
            # ahead of the whole graph's verdict would take (RoBERTa's log1p: the 1-node slice started 1.4 s
            # later, behind a 57-node half); `probe_first` moves them ahead of the first round.
            self.probed = self.localized(result)
            self.found += self.probed
            return
        if result.query.key == LOCATE_KEY:
            self.found += self.located(result)
            return
        if self.early.answered(result):
            return
        candidate = self.by_key[result.query.key]
        if self.crashed_unexpectedly(result) and candidate not in self.retried:
            # A worker killed from outside (OOM killer, a user's kill) must not cost the search a reduction.
            self.report(candidate, result, "crash")
            self.retried.add(candidate)
            self.pool.submit(self.query(candidate), self.priority.get(candidate, False))
            return
        self.record(candidate, result)
        if candidate in self.lies:
            self.probe_unless_lies_fail()
        if candidate == self.whole and not self.kernel_known:
            _, analysis = result_signature(result)
            provenance = provenance_in(result.log)
            kernel = failing_kernel(analysis, result.log, provenance)
            self.found += self.kernel_leads(kernel, provenance)
            if kernel is None and self.unplaced_cuda_fault(result):
                self.locate()

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
            raise ExportFailed(f"a candidate of {len(candidate)} nodes cannot be exported: {_detail(result)}")

    def report(self, candidate: Candidate, result: Result, verdict: Verdict) -> None:
        detail = _detail(result)
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

    def reclassify(self) -> None:
        self._verdicts = {c: self.verdict(r) for c, r in self.results.items()}
        self.probe_unless_lies_fail()

    # --- leads -------------------------------------------------------------------------------------

    def kernel_leads(self, kernel: KernelRef | None, provenance: Mapping[str, list[str]]) -> list[Candidate]:
        """Slices around the failing kernel's origin, best evidence first."""
        if not self.session.options.slicing or kernel is None:
            return []
        self.kernel_known = True
        kernel = resolve_kernel(kernel, self.graph, read_kernel_source(kernel), provenance=provenance)
        how = "named by Inductor" if kernel.exact else "guessed from its ops"
        self.reporter.say(f"kernel {kernel.name}: source nodes {', '.join(kernel.source_nodes[:8])} ({how})")
        slices = [self.space.closure(s) for s in kernel_slices(kernel, self.graph)]
        return list(dict.fromkeys(s for s in slices if s != self.whole))

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
            p.QueryRequest(key=LOCATE_KEY, original=True, provenance=True), background=True, env=LAUNCH_BLOCKING
        )

    def located(self, result: Result) -> list[Candidate]:
        provenance = provenance_in(result.log)
        kernel = failing_kernel(None, result.log, provenance)
        if kernel is None:
            self.reporter.say("the launch-blocking run placed no kernel; the search goes on")
            return []
        return self.kernel_leads(kernel, provenance)

    def stop_guessing(self) -> None:
        """The search is over: what still runs in the background can no longer matter."""
        self.probe_waits = False
        for key in (PROBE_KEY, LOCATE_KEY):
            self.pool.cancel(key)

    def probe(self) -> bool:
        """Start the accuracy probe in the background (see worker.Worker.probe); False if slicing is off. Where
        a fake kernel lies, the slices that show the lie go first (`lie_leads`) and the probe only once none of
        them can fail: on two workers it would take the worker of the lie's next slice for a whole-graph compile
        (RoBERTa's lying row_scale: 25 s beside the whole graph's verdict, after which its 4-node ring won)."""
        if not self.session.options.slicing:
            return False
        self.probe_waits = True
        self.probe_unless_lies_fail()
        return True

    def probe_unless_lies_fail(self) -> None:
        """Start the waiting probe once every slice of a lie passed, failed another way, or is part of one that
        passed."""
        verdicts = self._verdicts
        settled = all(
            verdicts.get(s, "fails") != "fails"
            or any(s < wider and verdicts.get(wider) == "passes" for wider in self.lies)
            for s in self.lies
        )
        if self.probe_waits and settled:
            self.probe_waits = False
            self.pool.submit(
                p.QueryRequest(key=PROBE_KEY, probe=True, values_path=self.session.layout.values), background=True
            )

    def probe_first(self, race: Race) -> None:
        """Move the probe's slices (racing since it answered) ahead of the first round, waiting for it to answer
        PROBE_GRACE seconds or half the whole graph's compile at most: it compiles beside the whole graph and
        answers about when that does (within 1 s on every workload measured), but one slower than that, or hung,
        must not hold up the search: its slices then race as guesses when they come."""
        whole = self.results.get(self.whole)
        grace = max(PROBE_GRACE, whole.seconds / 2 if whole else 0.0)
        wake_at = self.wake_at = time.monotonic() + grace
        try:
            race.until(
                lambda: (
                    self.probed is not None
                    or not self.pool.in_flight()
                    or self.probe_waits
                    or race.winner(self.whole) is not None
                    or time.monotonic() >= wake_at
                )
            )
        finally:
            self.wake_at = None
        if self.probe_waits:  # behind a lie's slices: the search starts (from one that failed), the probe after
            return
        if self.probed is None:
            self.reporter.say(
                f"the accuracy probe has not answered {grace:.0f} s after the whole graph; "
                "the search starts, its slices will race beside it"
            )
        race.lead(self.probed or [])

    def localized(self, result: Result) -> list[Candidate]:
        """The first node whose compiled value diverges, alone, then with its producers: the slices
        where an accuracy failure starts. Nothing when the probe is inconclusive."""
        diverged = result.outcome.diverged if result.outcome else []
        args = self.graph.compute_args()
        if self.session.accuracy == "accuracy":
            diverged = reaching_outputs(diverged, args, self.graph.outputs)
        if not diverged:
            why = _detail(result) or "no intermediate value diverges"
            self.reporter.say(f"accuracy probe inconclusive ({why[:120]}); the search goes on")
            return []
        first = diverged[0]
        self.reporter.say(f"accuracy probe: {len(diverged)} values diverge, the first at {first}")
        slices = self.rings(first)
        # The node alone is the likeliest (a wrong kernel), the widest ring next: a lying fake kernel needs its
        # producers (RoBERTa's row_scale: 1 node passes, 3 abort, 4 fail), and two workers start these first.
        slices = slices[:1] + slices[:0:-1]
        # A slice that feeds a lying node's value to a node it keeps feeds it with its true sizes: it cannot show
        # the lie, and its worker is better spent on a ring's complement (RoBERTa's lying fake: the 3-node ring).
        showing = [s for s in slices if self.may_show_lies(s)]
        return showing or slices

    def rings(self, node: str) -> list[Candidate]:
        """`node` alone, then with its producers, then with theirs: the slices where a wrong value starts."""
        args = self.graph.compute_args()
        rings = [{node}]
        for _ in range(MAX_PROBE_LEADS - 1):
            rings.append(rings[-1] | {a for n in rings[-1] for a in args.get(n, ()) if a in args})
        return list(dict.fromkeys(s for s in (self.space.closure(r) for r in rings) if s != self.whole))

    def may_show_lies(self, candidate: Candidate) -> bool:
        args = self.graph.compute_args()
        return not any(a in self.mismatched and a not in candidate for n in candidate for a in args[n])

    def lie_leads(self) -> list[Candidate]:
        """The rings around each node that reads a value whose fake kernel lies, widest first, those that keep
        the liar: known before any compile, they race ahead of the probe (`probe`)."""
        if not (self.session.options.slicing and self.session.accuracy):
            return []
        readers = dict.fromkeys(reader for _, reader in self.lying_reads())
        slices = [s for reader in readers for s in reversed(self.rings(reader)) if self.may_show_lies(s)]
        self.lies = list(dict.fromkeys(slices))
        if self.lies:
            self.reporter.say(f"{len(self.lies)} slices around the lying fake kernel's readers race first")
        return self.lies

    def shown_together(self) -> list[Candidate]:
        """Each node whose fake kernel lies with each node that reads it: where the lie is the failure, a
        graph holding only one of them cannot show it."""
        return [frozenset(pair) for pair in self.lying_reads()]

    def lying_reads(self) -> list[tuple[str, str]]:
        """(a node whose fake kernel lies, a node that reads it), in graph order of the readers."""
        args = self.graph.compute_args()
        return [
            (liar, reader) for reader, operands in args.items() for liar in sorted(self.mismatched) if liar in operands
        ]

    # --- the standalone check ----------------------------------------------------------------------

    def standalone_header(self, nodes: int) -> list[str]:
        return [
            f"aoti-lens repro_standalone: {nodes} of {self.progress.start_nodes} graph nodes",
            f"reproduces: {self.target.describe() if self.target else 'the original failure'}",
        ]

    # --- candidates and checkpoints ----------------------------------------------------------------

    def query(self, candidate: Candidate) -> p.QueryRequest:
        key = key_of(candidate)
        save_pt2 = os.path.join(self.session.layout.candidates, f"{key}.pt2")
        if candidate == self.whole:  # the loaded program itself: no values, no re-export on the critical path
            # provenance names the failing kernel's nodes; an accuracy failure names no kernel
            provenance = self.session.options.slicing and not self.session.accuracy
            return p.QueryRequest(key=key, original=True, save_pt2=save_pt2, provenance=provenance)
        return p.QueryRequest(
            key=key, kept=sorted(candidate), values_path=self.session.layout.values, save_pt2=save_pt2
        )

    def accept(self, candidate: Candidate) -> Candidate:
        """A smaller failing graph becomes the current one and, at once, a checkpoint. One the search took
        without its compile (a part of it failed) waits for the next round's, which failed itself."""
        if len(candidate) < self.progress.nodes and self.verdicts.get(candidate) == "fails":
            self.progress.nodes = len(candidate)
            self.write_checkpoint(candidate)
            # a larger graph's standalone check, started beside the round a guess won meanwhile, holds a worker
            # the rounds after it need
            self.early.drop_unless_for(candidate)
        return candidate

    def write_checkpoint(self, candidate: Candidate) -> bool:
        saved = _saved_program(self.results[candidate]) if candidate in self.results else None
        if saved is None:
            self.reporter.log(f"no saved program for the {len(candidate)}-node graph; checkpoint skipped", "warning")
            return False
        pt2, code = saved
        header = [
            f"aoti-lens checkpoint: {len(candidate)} of {self.progress.start_nodes} graph nodes",
            f"reproduces: {self.target.describe() if self.target else 'the original failure'}",
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


class Checkpointing:
    """The search's Oracle: the race's rounds, each smaller failing graph a checkpoint at once, each
    candidate known already reported as a cached verdict."""

    def __init__(self, race: Race, oracle: PoolOracle) -> None:
        self.race = race
        self.oracle = oracle

    def first_failing(
        self, candidates: Sequence[Candidate], current: Candidate, then: NextRound | None = None
    ) -> Candidate | None:
        self.report_cached(candidates)
        hit = self.race.first_failing(candidates, current, then)
        return self.oracle.accept(hit) if hit is not None else None

    def failing(self, candidates: Sequence[Candidate], current: Candidate) -> list[Candidate]:
        self.report_cached(candidates)
        if self.race.needs_several(candidates, current):
            # its complements will likely all pass and make it the result: its standalone check starts now,
            # on the worker its own compile left, not after the round (on two workers, 5 compiles in 3 waves)
            self.oracle.early.start(current)
        found = self.race.failing(candidates, current)
        if found:
            self.oracle.accept(found[0])
        return found

    def expect_final(self, candidate: Candidate) -> None:
        self.race.start(candidate)  # its own compile first, on the first idle worker
        self.oracle.early.start(candidate)

    def report_cached(self, candidates: Sequence[Candidate]) -> None:
        for candidate in candidates:
            verdict = self.oracle.verdicts.get(candidate)
            if verdict is not None:
                self.oracle.reporter.emit(
                    CandidateEvent(
                        nodes=len(candidate),
                        verdict=verdict,
                        seconds=0.0,
                        cached=True,
                        queries=self.oracle.progress.queries,
                    )
                )


def reaching_outputs(diverged: list[str], args: Mapping[str, Sequence[str]], outputs: Sequence[str]) -> list[str]:
    """The diverging nodes whose error reaches a diverging output through diverging values alone, in
    graph order. The loose accuracy check ignores values that are not floating point, so an error that
    only flips a boolean mask (which the probe does not compare) is not the failure being minified:
    PyTorch's accuracy-vs-strict-accuracy test ends at relu, not at the log1p that feeds a mask."""
    wrong = set(diverged)
    reached = {o for o in outputs if o in wrong}
    frontier = list(reached)
    while frontier:
        for arg in args.get(frontier.pop(), ()):
            if arg in wrong and arg not in reached:
                reached.add(arg)
                frontier.append(arg)
    return [n for n in diverged if n in reached]


def minify(session: Session, reporter: Reporter) -> DoneEvent:
    options = session.options
    pool = session.pool(size=max(1, options.workers))
    progress: Progress | None = None
    try:
        graph = pool.call(p.DescribeRequest()).graph
        values = stored_values(session, pool, reporter)
        order = graph.compute_nodes()
        progress = Progress(start_nodes=len(order), nodes=len(order))
        space = Space(order=order, closure=make_closure(graph.compute_args(), set(values.stored)))
        oracle = PoolOracle(session, pool, reporter, progress, space, graph, [m.node for m in values.mismatches])
        race = Race(oracle, together=oracle.shown_together())
        reporter.say(f"minifying {len(order)} nodes with {options.workers} worker(s)")
        # The loose accuracy check cannot tell a wrong value that reaches the output from one that only feeds
        # a boolean mask (PyTorch's accuracy-vs-strict-accuracy parity): split into single nodes, the mask's
        # log1p alone, made an output, fails first and the search drifts to it. Halving keeps PyTorch's order
        # on the graphs the search reaches; a guess that won (the probe's widest ring on RoBERTa's lying fake
        # kernel: 4 nodes, all needed) is still split, its halves would pass.
        small = 0 if session.accuracy == "accuracy" else SMALL_GRAPH
        # the round after a half that fails is the first round from that half, --max-granularity aside
        current = first_round(
            session,
            oracle,
            race,
            graph,
            reporter,
            then=lambda whole: opening_round(space, whole, max_granularity=options.max_granularity, small_graph=small),
            after=lambda half: opening_round(space, half, small_graph=small),
        )
        if options.slices_first:
            current = oracle.accept(race.settle_guesses(current))
        final = minimize(
            space,
            current,
            Checkpointing(race, oracle),
            max_granularity=options.max_granularity,
            small_graph=small,
            guessed=current != oracle.whole,
        )
        race.close()
        oracle.stop_guessing()
        if race.implied:
            reporter.say(f"{race.implied} candidates not compiled: each is part of a graph that passed")
        return finish(session, oracle, final, reporter)
    except KeyboardInterrupt:
        cancel(session, progress, reporter)
        raise
    finally:
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


def first_round(
    session: Session,
    oracle: PoolOracle,
    race: Race,
    graph: GraphInfo,
    reporter: Reporter,
    then: NextRound,
    after: NextRound,
) -> Candidate:
    """The whole graph's verdict, with the guesses known before it (an earlier `run`'s kernel, the
    accuracy probe) already racing, and the search's first round (`then`) and the rounds after its candidates
    (`after`) on the workers they leave; a guess that failed meanwhile becomes the start. What runs before the
    target is known is classified again once it is."""
    full = oracle.whole
    saved = session.saved_failure()
    oracle.target = saved.signature if saved else None
    if not session.options.skip_sanity:
        race.start(full)
    if saved is not None and saved.kernel is not None:
        race.race(oracle.kernel_leads(saved.kernel, {}))
    race.race(oracle.lie_leads())
    probing = bool(session.accuracy) and oracle.probe()
    if not session.options.skip_sanity:
        race.verdict(full, then, after)
        oracle.target = sanity(session, oracle, full)
        oracle.reclassify()
    if probing:  # localized by values, not by search: the probe's slices go ahead of the first round
        oracle.probe_first(race)
    reporter.emit(
        StartEvent(
            nodes=len(full),
            signature=oracle.target or Signature("Any", "any failure"),
            graph=graph.code,
            workers=session.options.workers,
        )
    )
    reporter.say(f"target: {oracle.target.describe() if oracle.target else 'any failure'}")
    won = race.winner(full)
    return oracle.accept(won) if won is not None else full


def sanity(session: Session, oracle: PoolOracle, full: Candidate) -> Signature:
    result = oracle.results[full]
    signature, _ = result_signature(result)
    if signature is None:
        why = "it could not be exported" if oracle.verdicts[full] == "export_error" else "it ran without error"
        raise DoesNotFail(f"the graph does not fail here: {why}{': ' + _detail(result) if _detail(result) else ''}")
    if session.check_str and oracle.verdict(result) != "fails":
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
    pt2 = result.query.save_pt2
    if not pt2 or not os.path.exists(pt2):
        return None
    try:
        with open(p.code_beside(pt2), encoding="utf-8") as f:
            return pt2, f.read()
    except OSError:
        return pt2, ""


def _detail(result: Result) -> str:
    if result.outcome is None:
        return result.detail.splitlines()[0] if result.detail else ""
    if result.outcome.error is not None:
        return result.outcome.error.signature.describe()
    return result.outcome.text.splitlines()[0] if result.outcome.text else ""


def finish(session: Session, oracle: PoolOracle, final: Candidate, reporter: Reporter) -> DoneEvent:
    progress = oracle.progress
    if progress.checkpoint_nodes != len(final) and not oracle.write_checkpoint(final) and progress.checkpoint:
        reporter.log(
            f"the {len(final)}-node graph could not be saved; repro.py is the "
            f"{progress.checkpoint_nodes}-node checkpoint",
            "warning",
        )
    if progress.checkpoint is None or progress.checkpoint_nodes is None:
        raise RuntimeError(f"no failing graph could be saved; see the worker logs in {session.layout.work}")
    repro = write_repro(session.layout, progress.checkpoint)
    standalone, fallback = write_standalone(
        session,
        oracle.pool,
        sorted(final),
        oracle.standalone_header(len(final)),
        oracle.verdict,
        checked=oracle.early.result_for(final, oracle.wait),
    )
    reporter.say(f"wrote {standalone}" + (f" (falls back to repro.py: {fallback})" if fallback else ""))
    if session.options.copy_to:
        reporter.say(f"copied repro to {copy_repro(session.layout, session.options.copy_to)}")
    done = DoneEvent(
        nodes=progress.checkpoint_nodes,
        repro=repro,
        queries=progress.queries,
        seconds=progress.seconds,
        start_nodes=progress.start_nodes,
        signature=oracle.target,
    )
    reporter.emit(done)
    return done


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
