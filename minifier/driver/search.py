"""The search for a smallest failing subgraph. Pure logic over sets of node names; torch-free.

A candidate is a set of compute nodes of the original graph (see graph.build_candidate), so removing
an interior node, dead code, unused inputs and outputs, and truncation are all just smaller sets.
The search is delta debugging (ddmin) over contiguous chunks in topological order. It returns a
1-minimal set: removing any single node makes the failure go away. As in CDD and ProbDD, a failure
is taken to need all of its nodes (monotone): a round's candidate that is part of a graph that ran
cleanly is not compiled, it passes too.

Guesses never hold it up. `Race` runs the rounds on a `Tester` (the worker pool, or a simulated clock
in the tests) and races guesses beside them: subgraphs that evidence points to (the failing kernel's
source nodes, the first intermediate value that diverges). A guess from a kernel's origin runs in the
background on a worker the rounds leave free; one from diverging values goes ahead of the first round
(`lead`). Either lives across rounds and wins only by failing first: a failing guess smaller than the
current graph replaces it at once. Whatever can no longer matter (a graph not smaller than the current
one, a round's candidate outside it) is stopped.

Rounds run ahead, on workers nothing else will take. A round that has a failing candidate but waits for a
smaller or earlier one (its result must not depend on which worker is faster) stops what ranks after the
failing one, which can no longer be its result, and starts the round that would follow the failing one in the
background (a failing candidate often compiles much sooner than a passing one). Spare workers after that take the
rounds that would follow each candidate still undecided, best first. Such work is kept while the round may take
that candidate, stopped once it cannot (the candidate passed, or ranks after a failing one); once one failed, what
runs ahead of those ranking before it gives up the workers the failing one's round lacks, and no more.
Monotone the other way too: a candidate whose round ran ahead and holds a failing graph fails, and the round
takes it without waiting for its own compile, which is stopped (the next round, already known, takes a graph
that failed itself). Why each rule exists, with the workloads that showed it: bench/RESULTS.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .verdicts import implied_passing, with_implied_failures

Candidate = frozenset[str]


NextRound = Callable[[Candidate], Sequence[Candidate]]


class Oracle(Protocol):
    def first_failing(
        self, candidates: Sequence[Candidate], current: Candidate, then: NextRound | None = None
    ) -> Candidate | None:
        """Test candidates (concurrently where it can); return a failing graph smaller than `current`,
        one of them or one found meanwhile by other means, or None. `then(hit)` is the round that would
        follow `hit`: an oracle may start it early."""

    def failing(self, candidates: Sequence[Candidate], current: Candidate) -> list[Candidate]:
        """Test the candidates, all but those larger than one that fails; those that fail, smallest first (ties
        in the candidates' order), or [a failing graph smaller than `current` found meanwhile by other means]."""

    def expect_final(self, candidate: Candidate) -> None:
        """`candidate`, about to be tested, likely ends the search if it fails: an oracle may start what
        follows the search for it now (the standalone check)."""


class Tester(Protocol):
    """Runs candidates asynchronously and says what failed: the worker pool, or a simulated clock."""

    @property
    def verdicts(self) -> Mapping[Candidate, str]:
        """Every verdict known so far ("fails" is the failure being minified)."""

    def start(self, candidate: Candidate, background: bool) -> None:
        """Queue a candidate; foreground ones go first. Starting a running one again sets its priority."""

    def stop(self, candidate: Candidate) -> None:
        """Forget a queued candidate, or kill the worker that runs it."""

    def wait(self) -> None:
        """Block until something happened: a verdict, or new leads."""

    def spare(self) -> int:
        """Workers that nothing queued or running will take."""

    def compiling(self, candidate: Candidate) -> bool:
        """A worker is on it now (not only queued)."""

    def leads(self) -> list[Candidate]:
        """Guesses that the evidence gathered since the last call points to, best first."""

    def together(self) -> Sequence[Candidate]:
        """Node sets the failure likely needs several of (a lying fake kernel and a node that reads it, two nodes
        of a kernel that failed while fused), as evidence has found them so far."""


@dataclass(frozen=True)
class Space:
    order: list[str]
    closure: Callable[[Iterable[str]], Candidate]

    @property
    def whole(self) -> Candidate:
        return frozenset(self.order)

    def ordered(self, nodes: Candidate) -> list[str]:
        return [n for n in self.order if n in nodes]


def key_of(candidate: Candidate) -> str:
    """A candidate's name in the pool and in file names: a hash of its node set."""
    return hashlib.sha1("\n".join(sorted(candidate)).encode()).hexdigest()[:16]


def make_closure(args: dict[str, list[str]], cuttable: set[str]) -> Callable[[Iterable[str]], Candidate]:
    """Candidates must be buildable: a kept node whose input cannot be fed as a concrete tensor
    (a tuple-valued node, or one past where the eager run stopped) keeps that input's producer."""

    def closure(nodes: Iterable[str]) -> Candidate:
        kept = set(nodes)
        todo = list(kept)
        while todo:
            for a in args.get(todo.pop(), ()):
                if a in args and a not in kept and a not in cuttable:
                    kept.add(a)
                    todo.append(a)
        return frozenset(kept)

    return closure


def smallest_failure_known(candidates: Sequence[Candidate], verdicts: Mapping[Candidate, str]) -> bool:
    """The candidate the round would take (the smallest failing one, the earliest among equals) is known: a
    round tested concurrently may end. Waiting for a smaller one costs one small compile, taking the first to
    fail can cost whole rounds; waiting for an earlier one of the same size makes the result the same on every
    run, whichever worker is faster (with two accuracy bugs, PyTorch's --strict-accuracy test expects the first)."""
    for candidate in sorted(candidates, key=len):
        if candidate not in verdicts:
            return False
        if verdicts[candidate] == "fails":
            return True
    return False


def canonical(candidate: Candidate) -> tuple[int, list[str]]:
    """Ties between failing graphs of one size are broken by name, never by which answered first,
    so that the same dump gives the same repro."""
    return len(candidate), sorted(candidate)


class Race:
    """Rounds on a Tester, with guesses raced beside them (see the module docstring)."""

    def __init__(self, tester: Tester) -> None:
        self.tester = tester
        self.racers: list[Candidate] = []
        self.running: dict[Candidate, bool] = {}  # -> in the background
        self.implied = 0  # candidates not compiled: part of a graph that passed

    def race(self, guesses: Iterable[Candidate]) -> None:
        """Start guesses in the background; nothing ever waits on them. Evidence outranks a round's candidate
        run ahead on spec: with no worker spare, a guess takes the worker of the youngest such candidate,
        which runs again when its round comes."""
        for guess in guesses:
            if guess not in self.racers:
                self.racers.append(guess)
                if guess not in self.running and not self.tester.spare():
                    self._make_room()
                self._start(guess, background=True)

    def _make_room(self) -> None:
        ahead = [c for c, bg in self.running.items() if bg and c not in self.racers and self.tester.compiling(c)]
        if ahead:
            self._drop(ahead[-1])

    def lead(self, guesses: Iterable[Candidate]) -> None:
        """Start guesses in the foreground, ahead of the rounds queued after them: evidence of values (the
        accuracy probe's first diverging node) is tried first. They still win only by failing."""
        for guess in guesses:
            if guess not in self.racers:
                self.racers.append(guess)
            self._start(guess, background=False)

    def until(self, done: Callable[[], bool]) -> None:
        """Let what runs answer until `done()` (the guesses go on)."""
        while not done():
            self._step()

    def start(self, candidate: Candidate) -> None:
        """Queue one candidate in the foreground, ahead of guesses queued after it."""
        self._start(candidate, background=False)

    def verdict(
        self,
        candidate: Candidate,
        then: NextRound | None = None,
        after: NextRound | None = None,
        room: int | None = None,
    ) -> str:
        """Test one candidate in the foreground (the whole graph) while the guesses go on, and the round `then`
        would start with if it fails runs ahead on spare workers. Workers still spare take the round `after`
        would follow each of those with, best first, until that one passes. At most `room` candidates run
        ahead at once (None: as many as workers are spare); guesses are not counted."""
        self._start(candidate, background=False)
        upcoming = list(then(candidate)) if then is not None else []
        beyond: dict[Candidate, list[Candidate]] = {}  # an upcoming candidate -> the round after it
        while candidate not in self.tester.verdicts:
            if room is None or self._ahead() < room:
                self._run_ahead(upcoming, room)
                if after is not None:
                    self._run_ahead_beyond(upcoming, beyond, after, room)
            self._step()
        verdict = self.tester.verdicts[candidate]
        if verdict != "fails":
            for ahead in [*upcoming, *(c for later in beyond.values() for c in later)]:
                self._drop(ahead)
        return verdict

    def winner(self, current: Candidate) -> Candidate | None:
        """The smallest guess known to fail that is smaller than the current graph."""
        failing = [r for r in self.racers if self.tester.verdicts.get(r) == "fails" and len(r) < len(current)]
        return min(failing, key=canonical) if failing else None

    def first_failing(
        self, candidates: Sequence[Candidate], current: Candidate, then: NextRound | None = None
    ) -> Candidate | None:
        """One round: its smallest failing candidate, or a guess that answered first; None if none fails.
        While it waits, the round `then` would follow with runs ahead on spare workers: the failing
        candidate's once one failed, before that each undecided candidate's, best first. What already runs of
        the rounds of those that rank before the failing one goes on where the failing one's round leaves room:
        one of them may still fail and win."""
        verdicts = self.tester.verdicts
        candidates = self._worth_compiling(candidates)
        ranked = sorted(candidates, key=len)  # the order the round takes a failing candidate in
        ahead: dict[Candidate, list[Candidate]] = {}  # a candidate that may be the result -> the round after it
        while True:
            hit = self.winner(current)
            if hit is not None:
                break
            known = with_implied_failures(verdicts, ahead)
            if smallest_failure_known(ranked, known):
                hit = next(c for c in ranked if known.get(c) == "fails")
                break
            first = next((c for c in ranked if known.get(c) == "fails"), None)
            deciding = ranked if first is None else ranked[: ranked.index(first)]
            untested = [c for c in candidates if c not in known and c in deciding]
            stale = ranked[len(deciding) + 1 :]  # can no longer be the round's result
            if then is not None:  # those still undecided, best first; once one failed, it and the rounds run ahead
                # of those that would still win over it (dropped, they would compile again from the start)
                undecided = sorted(untested, key=len)
                hopefuls = undecided if first is None else [first, *(c for c in undecided if c in ahead)]
                stale += self._rounds_after(ahead, hopefuls, then)
            needed = {*untested, *(c for upcoming in ahead.values() for c in upcoming)}
            for candidate in stale:
                if candidate not in needed:  # the same graph may be in this round and the one after
                    self._drop(candidate)
            if not untested:
                break
            for candidate in untested:
                self._start(candidate, background=False)
            if first is not None:
                self._yield_to_the_failing(ahead, untested)
            for upcoming in list(ahead.values())[: 1 if first is not None else None]:  # the others only go on
                self._run_ahead(upcoming)
            self._step()
        self._prune(hit or current)
        return hit

    def failing(self, candidates: Sequence[Candidate], current: Candidate) -> list[Candidate]:
        """A round that waits for its candidates, but once one failed only for those that rank before it and
        those of its size that a worker is on; those that fail, smallest first, or [a guess that won].
        Where the failure likely needs several nodes (`needs_several`), the larger candidates are queued first,
        and a smaller one is dropped once a graph holding it passed."""
        verdicts = self.tester.verdicts
        ranked = sorted(self._worth_compiling(candidates), key=len)  # first_failing's order
        several = self.needs_several(candidates, current)
        while (hit := self.winner(current)) is None:
            if several:
                kept = self._worth_compiling(ranked)
                for candidate in ranked:
                    if candidate not in kept:
                        self._drop(candidate)
                ranked = kept
            failed = next((i for i, c in enumerate(ranked) if verdicts.get(c) == "fails"), len(ranked))
            untested = [
                c
                for i, c in enumerate(ranked)
                if c not in verdicts and (i < failed or (len(c) == len(ranked[failed]) and self.tester.compiling(c)))
            ]
            if not untested:
                break
            for candidate in reversed(untested) if several else untested:
                self._start(candidate, background=False)
            self._step()
        found = [hit] if hit is not None else [c for c in ranked if verdicts.get(c) == "fails"]
        self._prune(found[0] if found else current)
        return found

    def needs_several(self, candidates: Sequence[Candidate], current: Candidate) -> bool:
        """Evidence that the failure of `current` needs several of its nodes: `current` is a guess that won while
        a guess of one of its nodes alone passed, or has not answered yet (should it fail, it wins and the order
        of the rest no longer matters), or `current` holds nodes known to fail together."""
        verdicts = self.tester.verdicts
        guessed = current in self.racers and any(
            len(c) == 1 and c in self.racers and verdicts.get(c, "passes") == "passes" for c in candidates
        )
        return guessed or any(len(nodes) > 1 and nodes <= current for nodes in self.tester.together())

    def expect_final(self, candidate: Candidate) -> None:
        """Nothing follows the rounds here; minify's oracle starts the standalone check."""

    def settle_guesses(self, current: Candidate) -> Candidate:
        """Wait for every guess smaller than `current` (the slices-first order the race replaces)."""
        pending = [r for r in self.racers if len(r) < len(current)]
        hit = self.first_failing(pending, current) if pending else None
        return hit or current

    def close(self) -> None:
        for candidate in list(self.running):
            self.tester.stop(candidate)
        self.running.clear()

    def _start(self, candidate: Candidate, background: bool) -> None:
        if candidate in self.tester.verdicts:
            return
        if candidate in self.running and (background or not self.running[candidate]):
            return  # running already with at least this priority
        self.tester.start(candidate, background)
        self.running[candidate] = background

    def _step(self) -> None:
        self.tester.wait()
        for candidate in [c for c in self.running if c in self.tester.verdicts]:
            del self.running[candidate]
        self.race(self.tester.leads())

    def _worth_compiling(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates less those that are part of a graph that passed (monotone: they pass too)."""
        implied = implied_passing(candidates, self.tester.verdicts)
        self.implied += len(implied)
        return [c for c in candidates if c not in implied]

    def _rounds_after(
        self, ahead: dict[Candidate, list[Candidate]], hopefuls: list[Candidate], then: NextRound
    ) -> list[Candidate]:
        """Keep `ahead` to the rounds after `hopefuls` (in their order, which is the order they get spare
        workers in), and say what the rounds it no longer holds had that those it holds have not: work for
        a candidate that passed, or that ranks after a failing one, to be stopped. Past the first, a round is
        only made while a worker is spare to run it."""
        before = dict(ahead)
        ahead.clear()
        for i, candidate in enumerate(hopefuls):
            if candidate in before:
                ahead[candidate] = before[candidate]
            elif i == 0 or self.tester.spare():
                ahead[candidate] = list(then(candidate))
        kept = {c for upcoming in ahead.values() for c in upcoming}
        return [c for upcoming in before.values() for c in upcoming if c not in kept]

    def _yield_to_the_failing(self, ahead: dict[Candidate, list[Candidate]], untested: list[Candidate]) -> None:
        """The round after the failing candidate (`ahead`'s first) takes the workers it lacks from the rounds run
        ahead of the undecided candidates after it, youngest first: it is needed unless one of those fails too.
        What this round still waits for (`untested`) keeps its worker."""
        rounds = list(ahead.values())
        if len(rounds) < 2:
            return
        others = {c for later in rounds[1:] for c in later} - {*rounds[0], *untested}
        short = len(self._not_started(rounds[0])) - self.tester.spare()
        for candidate in [c for c in reversed(self.running) if c in others][: max(0, short)]:
            self._drop(candidate)

    def _not_started(self, upcoming: list[Candidate]) -> list[Candidate]:
        return [c for c in upcoming if c not in self.running and c not in self.tester.verdicts]

    def _run_ahead(self, upcoming: list[Candidate], room: int | None = None) -> None:
        """The round after a candidate, a candidate on each spare worker (at most `room` run ahead at once), in
        the background: the round's own candidates keep every worker they can use."""
        waiting = self._not_started(upcoming)
        free = self.tester.spare() if room is None else min(self.tester.spare(), room - self._ahead())
        for candidate in waiting[: max(0, free)]:
            self._start(candidate, background=True)

    def _run_ahead_beyond(
        self,
        upcoming: list[Candidate],
        beyond: dict[Candidate, list[Candidate]],
        after: NextRound,
        room: int | None = None,
    ) -> None:
        """The rounds after `upcoming`'s candidates on the workers they leave, best first; a candidate's is
        stopped once it passes (its parts pass too)."""
        for first in sorted(upcoming, key=len):
            if self.tester.verdicts.get(first) == "passes":
                for later in beyond.pop(first, []):
                    self._drop(later)
            elif self.tester.spare():
                if first not in beyond:
                    beyond[first] = list(after(first))
                self._run_ahead(beyond[first], room)

    def _ahead(self) -> int:
        """Candidates running in the background that are not guesses: run ahead on spec."""
        return sum(1 for c, background in self.running.items() if background and c not in self.racers)

    def _drop(self, candidate: Candidate) -> None:
        if candidate in self.running and candidate not in self.racers:
            self.tester.stop(candidate)
            del self.running[candidate]

    def _prune(self, current: Candidate) -> None:
        """Stop what can no longer matter: a graph not smaller than the current one, and a round's
        candidate outside it. A smaller guess lives on into the next rounds."""
        for candidate in sorted(self.running, key=canonical):
            if len(candidate) >= len(current) or not (candidate in self.racers or candidate <= current):
                self.tester.stop(candidate)
                del self.running[candidate]


# A graph of at most this many nodes is split into single nodes at once: a guess that wins is a slice built
# around the evidence, most of whose nodes the failure needs, so its halves pass and ddmin's doubling is waste.
SMALL_GRAPH = 8
# A guess that won is split into single nodes at once up to this size: a fused kernel's group needs most of its
# nodes, and its halves, quarters and eighths all pass (bench/RESULTS.md, issue 33).
SMALL_GUESS = 16


def opening_round(
    space: Space,
    start: Candidate,
    *,
    max_granularity: int | None = None,
    small_graph: int = SMALL_GRAPH,
    guessed: bool = False,
) -> list[Candidate]:
    """The candidates of minimize's first round from `start` (its arguments), to run while `start`'s own
    verdict is awaited."""
    n = _first_granularity(start, max_granularity, _split_below(small_graph, guessed))
    return _round(space, start, min(n, len(start)))[2]


def minimize(
    space: Space,
    start: Candidate,
    oracle: Oracle,
    *,
    max_granularity: int | None = None,
    small_graph: int = SMALL_GRAPH,
    guessed: bool = False,
) -> Candidate:
    """ddmin from `start`. A small graph is split into single nodes at once: always when it is a guess that
    won (`guessed`: the start, or a hit from outside the round), and up to `small_graph` nodes otherwise."""

    def after(hit: Candidate, chunks: list[Candidate], complements: list[Candidate], n: int) -> int:
        """The granularity of the round after `hit`: a chunk, or a guess that won, starts again at halves
        (single nodes when small); a complement has one chunk fewer."""
        if hit in complements and hit not in chunks:
            return max(n - 1, 2)
        return _first_granularity(hit, None, _split_below(small_graph, hit not in chunks and hit not in complements))

    current = start
    n = _first_granularity(current, max_granularity, _split_below(small_graph, guessed))
    while len(current) >= 2:
        n = min(n, len(current))
        chunks, complements, candidates = _round(space, current, n)

        def then(hit: Candidate, chunks=chunks, complements=complements, n=n) -> list[Candidate]:
            return _round(space, hit, min(after(hit, chunks, complements, n), len(hit)))[2]

        if n == len(current) and complements:
            hit = _drop_removable(space, current, candidates, complements, oracle)
        else:
            hit = oracle.first_failing(candidates, current, then)
        if hit is None:
            if n >= len(current):
                break
            n = min(2 * n, len(current))
            continue
        n = after(hit, chunks, complements, n)
        current = hit
    return current


def _drop_removable(
    space: Space, current: Candidate, candidates: list[Candidate], complements: list[Candidate], oracle: Oracle
) -> Candidate | None:
    """The single nodes' round, waiting for every node's complement; then, where several of them fail, the graph
    without all of those nodes at once. A failure that needs a few of k nodes so loses the others in two rounds,
    not in one round per node. Its single-node
    complements are parts of graphs that passed, so it is 1-minimal without another compile: if it fails, the
    search likely ends with it."""
    failing = oracle.failing(candidates, current)
    if not failing or failing[0] not in complements:
        return failing[0] if failing else None  # a single node, or a guess that won meanwhile
    common = space.closure(frozenset.intersection(*(c for c in failing if c in complements)))
    if len(common) < len(failing[0]):
        oracle.expect_final(common)
        return oracle.first_failing([common], current) or failing[0]
    return failing[0]


def _round(space: Space, current: Candidate, n: int) -> tuple[list[Candidate], list[Candidate], list[Candidate]]:
    """ddmin's round at granularity n: the chunks, their complements, and the candidates to test."""
    chunks = [space.closure(c) for c in _split(space.ordered(current), n)]
    complements = [space.closure(current - c) for c in chunks] if n > 2 else []
    return chunks, complements, _distinct([c for c in chunks + complements if len(c) < len(current)])


def _split_below(small_graph: int, guessed: bool) -> int:
    return max(small_graph, SMALL_GUESS if guessed else 0)


def _first_granularity(current: Candidate, max_granularity: int | None, small_graph: int) -> int:
    if len(current) <= small_graph:
        return max(2, len(current))
    return 2 if not max_granularity else max(2, math.ceil(len(current) / max_granularity))


def _split(items: list[str], n: int) -> list[Candidate]:
    size, extra = divmod(len(items), n)
    chunks, at = [], 0
    for i in range(n):
        width = size + (1 if i < extra else 0)
        chunks.append(frozenset(items[at : at + width]))
        at += width
    return [c for c in chunks if c]


def _distinct(candidates: list[Candidate]) -> list[Candidate]:
    seen: list[Candidate] = []
    for c in sorted(candidates, key=len):
        if c and c not in seen:
            seen.append(c)
    return seen
