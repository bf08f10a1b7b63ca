"""Evidence from values, for accuracy failures: the probe (one compile of the graph with every node an output,
each compared with the eager fp64 reference) names the first value that diverges, and the slices around it
race ahead of the first round. A custom op whose fake kernel lies about its output (found by the eager run
that stores the graph's values) is shown by the slices around its readers, which race before the probe."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set

from ..contract.events import Verdict
from ..exchange import worker_protocol as p
from ..processes.pool import Result
from .evidence import Context, Source
from .search import Candidate, Race
from .verdicts import one_line

PROBE_KEY = "probe"
MAX_PROBE_LEADS = 3  # slices around the first diverging node, widening
PROBE_GRACE = 5.0  # seconds the first round waits for the probe after the whole graph's verdict, at least


class AccuracyProbe(Source):
    def __init__(
        self, context: Context, verdicts: Callable[[], Mapping[Candidate, Verdict]], mismatched: Iterable[str] = ()
    ) -> None:
        super().__init__(context)
        self.verdicts = verdicts  # the search's verdicts so far
        self.probed: list[Candidate] | None = None  # the accuracy probe's slices, once it answered
        self.mismatched = set(mismatched)  # nodes whose fake kernel gives other sizes than the op
        self.lies: list[Candidate] = []  # slices that show a lying fake kernel, raced before the probe
        self.probe_waits = False  # the probe starts once no slice of a lie can fail
        self.wake_at: float | None = None  # a wait returns by then (monotonic), answered or not

    def owns(self, result: Result) -> bool:
        return result.query.key == PROBE_KEY

    def answer(self, result: Result) -> list[Candidate]:
        """The probe's slices: they race at once (`probe_first` moves them ahead of the first round), since the
        answer frees the worker that the round run ahead of the whole graph's verdict would take."""
        self.probed = self.localized(result)
        return self.probed

    def stop(self) -> None:
        self.probe_waits = False
        self.pool.cancel(PROBE_KEY)

    def start(self) -> bool:
        """Start the accuracy probe in the background (see worker.Worker.probe); False if slicing is off. Where
        a fake kernel lies, the slices that show the lie go first (`lie_leads`) and the probe only once none of
        them can fail: it would take the worker of the lie's next slice for a whole-graph compile."""
        if not self.session.options.slicing:
            return False
        self.probe_waits = True
        self.probe_unless_lies_fail()
        return True

    def probe_unless_lies_fail(self) -> None:
        """Start the waiting probe once every slice of a lie passed, failed another way, or is part of one that
        passed."""
        verdicts = self.verdicts()
        settled = all(
            verdicts.get(s, "fails") != "fails"
            or any(s < wider and verdicts.get(wider) == "passes" for wider in self.lies)
            for s in self.lies
        )
        if self.probe_waits and settled:
            self.probe_waits = False
            self.pool.submit(p.ProbeRequest(key=PROBE_KEY, values_path=self.session.layout.values), background=True)

    def probe_first(self, race: Race, whole: Result | None) -> None:
        """Move the probe's slices (racing since it answered) ahead of the first round, waiting for it to answer
        PROBE_GRACE seconds or half the whole graph's compile at most: it compiles beside the whole graph and
        answers about when that does, but one slower than that, or hung, must not hold up the search: its slices
        then race as guesses when they come."""
        grace = max(PROBE_GRACE, whole.seconds / 2 if whole else 0.0)
        wake_at = self.wake_at = time.monotonic() + grace
        try:
            race.until(
                lambda: (
                    self.probed is not None
                    or not self.pool.in_flight()
                    or self.probe_waits
                    or race.winner(self.space.whole) is not None
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
        found = result.outcome.divergence() if result.outcome else p.Divergence()
        diverged = found.diverged
        args = self.graph.compute_args()
        if self.session.accuracy == "accuracy" and result.outcome:
            diverged = reaching_outputs(diverged, args, self.graph.outputs, set(found.uncompared))
        if not diverged:
            why = one_line(result) or "no intermediate value diverges"
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
        return list(dict.fromkeys(s for s in (self.space.closure(r) for r in rings) if s != self.space.whole))

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


def reaching_outputs(
    diverged: list[str], args: Mapping[str, Sequence[str]], outputs: Sequence[str], uncompared: Set[str] = frozenset()
) -> list[str]:
    """The diverging nodes whose error reaches a diverging output through diverging values alone, in
    graph order. The loose accuracy check ignores values that are not floating point, so an error that
    only flips a boolean mask (which the probe does not compare) is not the failure being minified:
    PyTorch's accuracy-vs-strict-accuracy test ends at relu, not at the log1p that feeds a mask. A
    floating-point value the probe did not compare (`uncompared`: a view, as a CNN's flatten before its
    classifier) is passed through, or the error would stop there and the classifier be named."""
    wrong = set(diverged)
    reached = {o for o in outputs if o in wrong or o in uncompared}
    frontier = list(reached)
    while frontier:
        for arg in args.get(frontier.pop(), ()):
            if (arg in wrong or arg in uncompared) and arg not in reached:
                reached.add(arg)
                frontier.append(arg)
    return [n for n in diverged if n in reached]
