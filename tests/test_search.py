"""The search over node sets, with oracles that stand for known bug shapes, and the race of guesses
beside it on a simulated clock."""

import itertools

import pytest

from minifier.driver.search import Race, Space, make_closure, minimize, opening_round, smallest_failure_known


class CountingOracle:
    def __init__(self, fails):
        self.fails = fails
        self.seen = {}
        self.rounds = []  # (nodes of the current graph, the sizes its round tested)
        self.expected = []  # graphs said to likely end the search

    def first_failing(self, candidates, current, then=None):
        failing = self.failing(candidates, current)
        return min(failing, key=len) if failing else None

    def expect_final(self, candidate):
        self.expected.append(candidate)

    def failing(self, candidates, current):
        self.rounds.append((len(current), sorted({len(c) for c in candidates})))
        for c in candidates:
            self.seen.setdefault(c, self.fails(c))
        return sorted((c for c in candidates if self.seen[c]), key=len)


def chain(n):
    names = [f"n{i}" for i in range(n)]
    args = {name: ([names[i - 1]] if i else []) for i, name in enumerate(names)}
    return names, Space(order=names, closure=make_closure(args, set(names)))


def test_one_culprit_is_found_alone_in_logarithmic_queries():
    for n in (8, 32, 128):
        names, space = chain(n)
        oracle = CountingOracle(lambda c: "n5" in c)
        assert minimize(space, frozenset(names), oracle) == {"n5"}
        assert len(oracle.seen) <= 4 * n.bit_length()


def test_two_distant_interacting_nodes_drop_the_interior():
    names, space = chain(64)
    oracle = CountingOracle(lambda c: {"n3", "n60"} <= c)
    assert minimize(space, frozenset(names), oracle) == {"n3", "n60"}


def test_closure_keeps_producers_that_cannot_be_fed_as_tensors():
    # n1 is tuple-valued: whoever reads it must keep it.
    args = {"n0": [], "n1": ["n0"], "n2": ["n1"], "n3": ["n2"]}
    closure = make_closure(args, cuttable={"n0", "n2", "n3"})
    assert closure({"n2"}) == {"n1", "n2"}
    space = Space(order=list(args), closure=closure)
    oracle = CountingOracle(lambda c: "n2" in c)
    assert minimize(space, frozenset(args), oracle) == {"n1", "n2"}


def test_result_is_one_minimal():
    names, space = chain(16)
    oracle = CountingOracle(lambda c: len({"n1", "n7", "n9"} & c) >= 2)
    result = minimize(space, frozenset(names), oracle)
    assert len(result) == 2
    assert all(not oracle.fails(result - {x}) for x in result)


def test_max_granularity_starts_with_small_chunks():
    names, space = chain(32)
    oracle = CountingOracle(lambda c: "n9" in c)
    minimize(space, frozenset(names), oracle, max_granularity=4)
    assert oracle.rounds[0][1][0] == 4
    oracle = CountingOracle(lambda c: "n9" in c)
    minimize(space, frozenset(names), oracle)
    assert oracle.rounds[0][1][0] == 16


def test_a_small_graph_is_split_into_single_nodes_at_once():
    # nn-transformer-cond: the guess that won held the cond, its getitem and three branch nodes; the
    # failure needs two of them. Halves of such a graph pass: one round per removed node instead.
    names, space = chain(64)
    oracle = CountingOracle(lambda c: {"n41", "n43"} <= c)
    assert minimize(space, frozenset(names[40:45]), oracle) == {"n41", "n43"}
    # the single nodes' round, then the graph without every node whose complement failed; its own single nodes
    # are known (halves first took [5, 5, 4, 3, 3, 2], removing one node a round [5, 4, 3, 2])
    assert oracle.rounds == [(5, [1, 4]), (5, [2]), (2, [1])]
    assert oracle.expected == [{"n41", "n43"}]  # its standalone check may start beside it


def test_the_nodes_whose_removal_fails_alone_but_not_together_are_removed_one_round_each():
    # not monotone: either of n41 and n42 may go, not both; the graph without both passes, ddmin's order goes on
    names, space = chain(64)
    fails = lambda c: {"n40", "n43"} <= c and len({"n41", "n42"} & c) == 1  # noqa: E731
    oracle = CountingOracle(fails)
    result = minimize(space, frozenset(names[40:44]), oracle)
    assert result in ({"n40", "n41", "n43"}, {"n40", "n42", "n43"}) and fails(result)
    assert oracle.rounds[:2] == [(4, [1, 3]), (4, [2])] and not fails(frozenset({"n40", "n43"}))


def test_a_guess_that_won_is_split_at_once_even_where_the_search_halves_small_graphs():
    # RoBERTa's lying fake kernel under the loose accuracy check (small_graph=0, PyTorch's halving order): the
    # probe's widest ring won with 4 nodes, all needed; its halves pass, and a worker waited for the round.
    names, space = chain(64)
    needs_all = lambda c: {"n40", "n41", "n42", "n43"} <= c  # noqa: E731
    ring = frozenset(names[40:44])
    oracle = CountingOracle(needs_all)
    assert minimize(space, ring, oracle, small_graph=0, guessed=True) == ring
    assert [sizes for _, sizes in oracle.rounds] == [[1, 3]]  # single nodes and their complements, one round
    oracle = CountingOracle(needs_all)
    assert minimize(space, ring, oracle, small_graph=0) == ring
    assert [sizes for _, sizes in oracle.rounds] == [[2], [1, 3]]  # halves first


def test_a_concurrent_round_waits_for_smaller_candidates_but_not_larger_ones():
    one, four, six = frozenset("a"), frozenset("abcd"), frozenset("abcdef")
    round_ = [one, four, six]
    assert not smallest_failure_known(round_, {})
    assert not smallest_failure_known(round_, {four: "fails"})  # the 1-node slice is still compiling
    assert smallest_failure_known(round_, {four: "fails", one: "passes"})  # 6 is cancelled
    assert smallest_failure_known(round_, {one: "fails"})
    assert not smallest_failure_known(round_, {one: "passes", four: "passes"})
    first, second = frozenset("ab"), frozenset("cd")  # of one size, the earlier is taken, whichever answers first
    assert not smallest_failure_known([first, second], {second: "fails"})
    assert smallest_failure_known([first, second], {first: "passes", second: "fails"})
    assert smallest_failure_known([first, second], {first: "fails"})


class SimulatedPool:
    """A search.Tester on a simulated clock: each candidate answers `latency(candidate)` after it starts, all
    at once, but only `workers` (the H200's eight) are spare for work run ahead. Compiles cost time in
    proportion to graph size."""

    def __init__(self, fails, latency=lambda c: len(c) / 10, leads_at=(), workers=8, together=()):
        self.fails, self.latency, self.workers, self.known_together = fails, latency, workers, list(together)
        self.now = 0.0
        self._verdicts = {}
        self.running = {}  # candidate -> when it answers
        self.started, self.stopped = [], []
        self.scheduled_leads = sorted(leads_at, key=lambda lead: lead[0])  # (at, [candidates])
        self.released = []

    @property
    def verdicts(self):
        return self._verdicts

    def start(self, candidate, background):
        self.started.append((candidate, background))
        self.running.setdefault(candidate, self.now + self.latency(candidate))

    def stop(self, candidate):
        self.stopped.append(candidate)
        del self.running[candidate]

    def wait(self):
        times = list(self.running.values()) + [at for at, _ in self.scheduled_leads]
        self.now = max(self.now, min(times))
        for candidate, at in list(self.running.items()):
            if at <= self.now:
                del self.running[candidate]
                self._verdicts[candidate] = "fails" if self.fails(candidate) else "passes"
        while self.scheduled_leads and self.scheduled_leads[0][0] <= self.now:
            self.released += self.scheduled_leads.pop(0)[1]

    def leads(self):
        released, self.released = self.released, []
        return released

    def together(self):
        return self.known_together

    def spare(self):
        return max(0, self.workers - len(self.running))

    def compiling(self, candidate):
        return candidate in self.running  # every candidate started runs at once


def race_to_the_end(n, fails, guesses=(), latency=lambda c: len(c) / 10, leads_at=(), slices_first=False, workers=8):
    names, space = chain(n)
    pool = SimulatedPool(fails, latency, leads_at, workers)
    race = Race(pool)
    race.race(guesses)
    whole = frozenset(names)
    assert race.verdict(whole) == "fails"
    current = race.winner(whole) or whole
    if slices_first:
        current = race.settle_guesses(current)
    result = minimize(space, current, race)
    race.close()
    return result, pool


def test_slow_wrong_guesses_never_hold_up_the_search():
    culprit = lambda c: "n40" in c  # noqa: E731
    slow = {frozenset({"n3"}), frozenset({"n7"})}
    latency = lambda c: 1000.0 if c in slow else len(c) / 10  # noqa: E731
    alone, plain = race_to_the_end(64, culprit, latency=latency)
    result, pool = race_to_the_end(64, culprit, guesses=sorted(slow, key=sorted), latency=latency)
    assert result == alone == {"n40"}
    assert pool.now == pytest.approx(plain.now) and pool.now < 1000  # on its own time, the guesses still compiling
    assert set(pool.stopped) >= slow
    assert all(background for c, background in pool.started if c in slow)
    waited, _ = race_to_the_end(64, culprit, guesses=sorted(slow, key=sorted), latency=latency, slices_first=True)
    assert waited == {"n40"}


def test_waiting_for_slow_guesses_is_what_the_race_saves():
    slow = frozenset({"n3"})
    latency = lambda c: 1000.0 if c == slow else len(c) / 10  # noqa: E731
    _, pool = race_to_the_end(64, lambda c: "n40" in c, guesses=[slow], latency=latency, slices_first=True)
    assert pool.now > 1000


def test_a_fast_right_guess_wins_and_stops_the_round():
    right = frozenset({"n40"})
    latency = lambda c: 0.5 if c == right else len(c) / 10  # noqa: E731
    names, space = chain(64)
    pool = SimulatedPool(lambda c: "n40" in c, latency)
    race = Race(pool)
    whole = frozenset(names)
    pool._verdicts[whole] = "fails"  # the whole graph's verdict is in: the general search starts
    race.race([right])
    assert minimize(space, whole, race) == right
    assert pool.now == 0.5  # the guess answered first; no round finished
    halves = [c for c, background in pool.started if not background]
    assert len(halves) == 2 and all(len(c) == 32 for c in halves)
    ahead = {c for c, background in pool.started if background and c != right}  # the rounds after each half
    assert ahead and all(any(c < half for half in halves) for c in ahead)
    assert set(pool.stopped) == set(halves) | ahead


def test_guesses_from_values_go_ahead_of_the_first_round_and_still_win_only_by_failing():
    names, space = chain(64)
    pool = SimulatedPool(lambda c: "n40" in c)
    race = Race(pool)
    whole = frozenset(names)
    pool._verdicts[whole] = "fails"
    alone, widest = frozenset({"n41"}), frozenset({"n39", "n40", "n41"})  # the first one passes
    race.lead([alone, widest])
    assert minimize(space, whole, race) == {"n40"}
    assert pool.started[:2] == [(alone, False), (widest, False)]  # queued before the first round's halves
    assert pool.verdicts[alone] == "passes" and pool.verdicts[widest] == "fails"
    assert pool.now < 0.3 + 0.2 * 2  # the halves (3.2 s) were stopped when the 3-node guess failed at 0.3 s
    assert frozenset(names[:32]) in pool.stopped


def test_a_guess_that_answers_late_still_replaces_the_current_graph():
    pair = frozenset({"n40", "n41"})
    latency = lambda c: 6.0 if c == pair else len(c) / 10  # noqa: E731
    names, space = chain(256)
    pool = SimulatedPool(lambda c: "n40" in c, latency, leads_at=[(2.0, [pair])])  # evidence found mid-search
    race = Race(pool)
    whole = frozenset(names)
    pool._verdicts[whole] = "fails"
    rounds = []

    class Recording:
        def first_failing(self, candidates, current, then=None):
            rounds.append(len(current))
            return race.first_failing(candidates, current, then)

    assert minimize(space, whole, Recording()) == {"n40"}
    assert (pair, True) in pool.started and pool.verdicts[pair] == "fails"
    # found at 2 s, failing at 8 s: the first round's halves take 12.8 s, their halves (run ahead) 6.4 s, whose
    # failure took the search on to 64 nodes; the pair then replaced that graph
    assert rounds == [256, 128, 64, 2]
    assert pool.now < 12.8


def test_concurrent_failures_are_accepted_in_a_fixed_order():
    a, b = frozenset({"n10"}), frozenset({"n50"})
    both = lambda c: "n10" in c or "n50" in c  # noqa: E731
    results = set()
    for first, second in ((a, b), (b, a)):

        def latency(c, first=first, second=second):
            return 1.0 if c == first else 1.0 + 1e-9 if c == second else len(c) / 10

        result, _ = race_to_the_end(64, both, guesses=[second, first], latency=latency)
        results.add(result)
    assert results == {a}  # not whichever answered first: the smaller name among the smallest


def test_a_guess_larger_than_the_current_graph_is_stopped_not_awaited():
    big = frozenset(f"n{i}" for i in range(30))
    latency = lambda c: 500.0 if c == big else len(c) / 10  # noqa: E731
    result, pool = race_to_the_end(64, lambda c: "n40" in c, guesses=[big], latency=latency)
    assert result == {"n40"} and pool.now < 500
    assert big in pool.stopped


def test_a_part_of_a_graph_that_passed_is_not_compiled():
    names, _space = chain(16)
    pool = SimulatedPool(lambda c: {"n9", "n12"} <= c)
    race = Race(pool)
    clean = frozenset(names[:8])
    pool._verdicts[clean] = "passes"
    pool._verdicts[frozenset({"n13", "n14"})] = "other_failure"  # only a clean run implies anything
    inside, outside, under_other = frozenset(names[:4]), frozenset(names[8:12]), frozenset({"n13"})
    assert race.first_failing([inside, outside, under_other], frozenset(names)) is None
    assert [c for c, _ in pool.started] == [outside, under_other] and race.implied == 1


def test_the_monotone_shortcut_still_finds_interacting_nodes_in_fewer_compiles():
    names, space = chain(140)
    window = lambda c: {"n60", "n62", "n66"} <= c  # noqa: E731
    counting = CountingOracle(window)
    assert minimize(space, frozenset(names), counting) == {"n60", "n62", "n66"}
    result, pool = race_to_the_end(140, window, workers=0)  # no round run ahead: the search's own compiles
    assert result == {"n60", "n62", "n66"}
    assert len(pool.verdicts) < len(counting.seen) / 1.5


def test_loose_accuracy_counts_only_errors_that_reach_an_output_through_floats():
    from minifier.driver.accuracy_probe import reaching_outputs

    # PyTorch's parity program: log1p -> gt (a bool: never probed) -> where; relu -> where (the output)
    args = {"log1p": ["x"], "gt": ["log1p"], "relu": ["x"], "where": ["gt", "relu", "relu"]}
    assert reaching_outputs(["log1p", "relu", "where"], args, ["where"]) == ["relu", "where"]
    assert reaching_outputs(["log1p"], args, ["where"]) == []  # the output is right: nothing to localize
    chain = {"a": ["x"], "b": ["a"], "c": ["b"]}
    assert reaching_outputs(["a", "b", "c"], chain, ["c"]) == ["a", "b", "c"]
    # a CNN's head: relu_ -> pool -> flatten (a view: its float value is not compared) -> linear
    head = {"relu_": ["x"], "pool": ["relu_"], "flatten": ["pool"], "linear": ["flatten"]}
    assert reaching_outputs(["relu_", "pool", "linear"], head, ["linear"]) == ["linear"]
    assert reaching_outputs(["relu_", "pool", "linear"], head, ["linear"], {"flatten"}) == ["relu_", "pool", "linear"]


def test_a_round_waiting_on_a_slow_passing_candidate_runs_the_round_after_its_failing_one():
    # GPT-2 with the out-of-bounds kernel on the H200: a candidate that fails ends its compile in 2 s, one that
    # passes takes a minute, and a round takes its failing half only once the earlier half has passed
    culprit = lambda c: "n63" in c  # noqa: E731  (always in the later half: every round waits)
    latency = lambda c: 2.0 if culprit(c) else 60.0  # noqa: E731

    waited, slow = rounds_on(SimulatedPool(culprit, latency), run_ahead=False)
    result, fast = rounds_on(SimulatedPool(culprit, latency), run_ahead=True)
    assert result == waited == {"n63"}  # the same rounds take the same candidates
    assert slow.now >= 4 * 60 and fast.now <= 0.6 * slow.now  # each round's passing half overlaps the one before
    ahead = [c for c, background in fast.started if background]
    assert frozenset(f"n{i}" for i in range(32, 48)) in ahead  # the failing half's halves, while the first half ran
    assert not any(background for c, background in slow.started)
    _, busy = rounds_on(SimulatedPool(culprit, latency, workers=0), run_ahead=True)  # the round's own candidates only
    assert busy.now == slow.now and not any(background for c, background in busy.started)


def test_a_round_whose_candidates_all_take_one_compile_runs_the_round_after_each_of_them():
    # Qwen2's complex sub on the H200: a candidate compiles in 6 to 10 s whether it fails or passes, and the
    # bisection of 204 nodes took eight rounds one after the other, six of eight workers idle
    culprit = lambda c: "n100" in c  # noqa: E731
    latency = lambda c: 6.0 + len(c) / 50  # noqa: E731
    waited, alone = rounds_on(SimulatedPool(culprit, latency, workers=0), n=204, run_ahead=True)
    result, ahead = rounds_on(SimulatedPool(culprit, latency), n=204, run_ahead=True)
    assert result == waited == {"n100"}
    assert ahead.now <= 0.7 * alone.now  # the round after the failing half had started beside it
    first_halves = [frozenset(f"n{i}" for i in range(a, b)) for a, b in ((0, 102), (102, 204))]
    quarters = [(c, background) for c, background in ahead.started if any(c < half for half in first_halves)]
    assert len(quarters) >= 4 and all(background for _, background in quarters[:4])  # both halves' halves at once
    assert len(ahead.started) <= 2 * len(alone.started)  # the price: compiles for halves that passed (38 vs 22)


def test_the_first_round_compiles_beside_the_whole_graph_and_is_dropped_if_it_passes():
    # Qwen2's complex sub on the H200: the original compiled for 11 s while six of eight workers waited for its
    # verdict before the halves (11 to 12 s each) could start
    culprit = lambda c: "n100" in c  # noqa: E731
    latency = lambda c: 6.0 + len(c) / 50  # noqa: E731
    names, space = chain(204)
    whole = frozenset(names)
    halves = opening_round(space, whole)
    assert sorted(map(len, halves)) == [102, 102]

    def search(then):
        pool = SimulatedPool(culprit, latency)
        race = Race(pool)
        assert race.verdict(whole, then) == "fails"
        result = minimize(space, whole, race)
        race.close()
        return result, pool

    waited, alone = search(None)
    result, beside = search(lambda w: opening_round(space, w))
    assert result == waited == {"n100"}
    assert {c for c, background in beside.started[1:3] if background} == set(halves)  # at once, in the background
    assert beside.now <= alone.now - 6.0  # of the whole graph's 10 s, most of the halves' 8 s were overlapped
    clean = SimulatedPool(lambda c: False, lambda c: 1.0 if c == whole else 50.0)
    assert Race(clean).verdict(whole, lambda w: opening_round(space, w)) == "passes"
    assert set(clean.stopped) == set(halves) and not clean.running  # nothing to minimize: no worker held


def test_the_rounds_after_the_halves_compile_beside_the_whole_graph_on_the_workers_still_spare():
    # Qwen2's complex sub on the H200: with the halves beside the original, five of eight workers sat idle 13 s
    culprit = lambda c: "n100" in c  # noqa: E731
    latency = lambda c: 6.0 + len(c) / 50  # noqa: E731
    names, space = chain(204)
    whole = frozenset(names)
    first = lambda w: opening_round(space, w)  # noqa: E731
    halves = first(whole)
    quarters = {q for half in halves for q in first(half)}
    assert sorted(map(len, quarters)) == [51, 51, 51, 51]

    def search(after):
        pool = SimulatedPool(culprit, latency)
        race = Race(pool)
        assert race.verdict(whole, first, after) == "fails"
        known = quarters & set(pool.verdicts)
        result = minimize(space, whole, race)
        race.close()
        return result, pool, known

    (shallow_result, shallow, none), (deep_result, deep, known) = search(None), search(first)
    assert shallow_result == deep_result == {"n100"}
    assert not none and known == quarters  # decided by the whole graph's verdict
    assert {c for c, background in deep.started[3:7] if background} == quarters  # at once, in the background
    assert all(sum(c == q for c, _ in deep.started) == 1 for q in quarters)  # each compiled once, for the search
    assert not quarters & set(deep.stopped)
    # Only a little sooner here, where every compile takes 6 to 10 s: the round after the whole graph's verdict
    # already runs the next one ahead, and the small graph's round ends both searches.
    assert deep.now < shallow.now
    clean = SimulatedPool(lambda c: False, lambda c: 1.0 if c == whole else 50.0)
    assert Race(clean).verdict(whole, first, first) == "passes"
    assert set(clean.stopped) == set(halves) | quarters and not clean.running  # nothing to minimize
    half_passes = SimulatedPool(lambda c: c == whole or c == halves[1], lambda c: 5.0 if c == halves[0] else 50.0)
    race = Race(half_passes)
    race.verdict(whole, first, first)
    assert set(half_passes.stopped) == set(first(halves[0]))  # its parts pass too: the workers go elsewhere


def test_a_candidate_whose_part_failed_is_taken_without_its_own_compile():
    # Qwen2's complex sub on the H200: the round waited 3 s for its second half after a quarter in it had failed
    names, space = chain(32)
    current = frozenset(names)
    first, second = opening_round(space, current)
    then = lambda hit: opening_round(space, hit)  # noqa: E731
    failing_part = then(second)[0]
    latency = {first: 2.0, second: 30.0, **{q: 5.0 for q in then(second)}, **{q: 50.0 for q in then(first)}}
    pool = SimulatedPool(lambda c: "n20" in c, latency=lambda c: latency[c], workers=6)
    race = Race(pool)
    assert race.first_failing([first, second], current, then) == second
    assert pool.now == 5.0 and second not in pool.verdicts and second in pool.stopped  # its worker is free
    assert pool.verdicts[failing_part] == "fails"  # the next round takes it from there, compiled

    def minimized(fails):
        pool = SimulatedPool(fails, latency=lambda c: 30.0 if c == second else len(c))
        pool._verdicts[current] = "fails"
        race = Race(pool)
        result = minimize(space, current, race)
        return result, pool

    result, pool = minimized(lambda c: "n20" in c)
    assert result == minimize(space, current, CountingOracle(lambda c: "n20" in c)) == {"n20"}
    assert second not in pool.verdicts
    # where a part fails but the graph around it would not (not monotone), the result still failed itself
    result, pool = minimized(lambda c: "n20" in c and c != second)
    assert result == {"n20"} and pool.verdicts[result] == "fails"


def test_a_small_graph_loses_every_node_it_does_not_need_in_two_compiles():
    # Qwen2's complex sub on the H200: from 6 nodes to the 3 it needs took three rounds of one compile each
    names, space = chain(6)
    needed = frozenset({"n1", "n3", "n4"})
    pool = SimulatedPool(lambda c: needed <= c, latency=lambda c: 7.0)
    race = Race(pool)
    pool._verdicts[frozenset(names)] = "fails"
    assert minimize(space, frozenset(names), race) == needed
    assert pool.now == 14.0  # every node's removal at once, then the three removable ones together
    assert race.implied == 3  # its own single-node complements are parts of graphs that passed


class QueuedPool(SimulatedPool):
    """A SimulatedPool where only `workers` candidates compile at once; the others wait in a queue, foreground
    ones first (as the worker pool's)."""

    def __init__(self, fails, latency, workers, leads_at=(), together=()):
        super().__init__(fails, latency, leads_at, workers, together)
        self.queue = []  # (candidate, background), in the order they start
        self.compiled = []

    def start(self, candidate, background):
        self.started.append((candidate, background))
        if candidate not in self.running and all(c != candidate for c, _ in self.queue):
            self.queue.append((candidate, background))
            self.queue.sort(key=lambda item: item[1])  # stable: foreground first, each in its order
        self._fill()

    def stop(self, candidate):
        self.stopped.append(candidate)
        self.running.pop(candidate, None)
        self.queue = [(c, b) for c, b in self.queue if c != candidate]
        self._fill()

    def wait(self):
        super().wait()
        self._fill()

    def spare(self):
        return max(0, self.workers - len(self.running) - len(self.queue))

    def _fill(self):
        while self.queue and len(self.running) < self.workers:
            candidate, _ = self.queue.pop(0)
            self.running[candidate] = self.now + self.latency(candidate)
            self.compiled.append(candidate)


def test_a_guess_that_needs_all_its_nodes_is_proven_by_its_complements_when_its_node_alone_passed():
    # RoBERTa's lying fake kernel on two workers: the probe's 4-node ring won after its node alone passed; its
    # three other single nodes and four complements took four waves of one compile, where two prove it
    names, space = chain(4)
    ring, alone = frozenset(names), frozenset({"n0"})

    def prove(alone_latency, raced=True):
        pool = QueuedPool(lambda c: c == ring, latency=lambda c: alone_latency if c == alone else 6.5, workers=2)
        race = Race(pool)
        if raced:
            race.lead([alone, ring])
        else:  # the same graph, reached by the search: nothing says its single nodes would pass
            pool._verdicts[ring] = "fails"
        race.until(lambda: ring in pool.verdicts)
        assert minimize(space, ring, race, guessed=True) == ring
        return pool, race

    for alone_latency in (6.0, 6.75):  # the node alone answers before the ring, or 0.25 s after it
        pool, race = prove(alone_latency)
        compiled = [len(c) for c in pool.compiled]
        assert compiled == [1, 4, 3, 3, 3, 3] and pool.now == 6.5 + 13.0 + (alone_latency > 6.5) * 0.25
        assert race.implied == 3  # the other single nodes, each part of a complement that passed
    unknown, _ = prove(6.0, raced=False)  # where nothing says so, single nodes still go first
    assert sorted(map(len, unknown.compiled[:2])) == [1, 1]


def test_nodes_known_to_fail_together_are_proven_by_complements_first():
    # a lying fake kernel (n1) and its reader (n2): a single node cannot show the lie
    names, space = chain(4)
    whole = frozenset(names)
    pool = QueuedPool(lambda c: c == whole, latency=lambda c: 6.5, workers=2, together=[frozenset({"n1", "n2"})])
    pool._verdicts[whole] = "fails"
    race = Race(pool)
    assert minimize(space, whole, race, guessed=True) == whole
    assert [len(c) for c in pool.compiled] == [3, 3, 3, 3] and race.implied == 4
    pool.known_together = [frozenset({"n1", "n9"})]  # a lie outside the graph says nothing of it
    assert not Race(pool).needs_several([frozenset({"n1"})], whole)


def test_a_fused_kernel_s_group_that_won_loses_its_needless_nodes_in_one_round_of_complements():
    # BERT's index_put KeyError (torch 2.13): the group of the kernel that failed while fused (9 nodes) won; the
    # failure needs 7 of them and none alone. Split by halves, quarters and eighths that all passed: 35 queries.
    names, space = chain(9)
    group, needed = frozenset(names), frozenset(names[1:8])
    pairs = [frozenset(pair) for pair in itertools.combinations(names, 2)]
    pool = QueuedPool(lambda c: needed <= c, latency=lambda c: 0.3, workers=2, together=pairs)
    pool._verdicts[group] = "fails"
    race = Race(pool)
    assert minimize(space, group, race, guessed=True) == needed
    assert sorted(len(c) for c in pool.compiled) == [7] + [8] * 9  # the complements, then the two nodes' removal
    unfused = QueuedPool(lambda c: needed <= c, latency=lambda c: 0.3, workers=2)
    unfused._verdicts[group] = "fails"
    assert minimize(space, group, Race(unfused), guessed=True) == needed
    assert min(len(c) for c in unfused.compiled) == 1  # nothing says so: single nodes go first, but no halves
    assert all(len(c) in (1, 7, 8) for c in unfused.compiled)


def test_what_a_round_ran_ahead_is_stopped_when_it_ends_without_it():
    names, _ = chain(16)
    halves = [frozenset(names[:8]), frozenset(names[8:])]
    pool = SimulatedPool(lambda c: False, latency=lambda c: 1.0 if c in halves else 50.0)
    assert Race(pool).first_failing(halves, frozenset(names), then=lambda hit: [frozenset(sorted(hit)[:4])]) is None
    ahead = [c for c, background in pool.started if background]
    assert len(ahead) == 2 and set(ahead) <= set(pool.stopped) and not pool.running  # no worker held after it


def rounds_on(pool, n=64, run_ahead=True):
    """minimize over a chain of n nodes on `pool`, its rounds run ahead or not; the result and the pool."""
    names, space = chain(n)
    race = Race(pool)
    pool._verdicts[frozenset(names)] = "fails"

    class Rounds:
        def first_failing(self, candidates, current, then=None):
            return race.first_failing(candidates, current, then if run_ahead else None)

        def failing(self, candidates, current):
            return race.failing(candidates, current)

        def expect_final(self, candidate):
            pass

    result = minimize(space, frozenset(names), Rounds())
    race.close()
    return result, pool


def test_a_round_that_ran_ahead_of_the_wrong_candidate_stops_that_work():
    # the later half fails first, then the earlier one fails too: the round takes the earlier one
    names, _space = chain(16)
    first, second = frozenset(names[:8]), frozenset(names[8:])
    pool = SimulatedPool(
        lambda c: c in (first, second) or c == frozenset(names[:4]),
        latency=lambda c: 10.0 if c == first else 1.0 if c == second else 50.0,
    )
    race = Race(pool)
    assert race.first_failing([first, second], frozenset(names), then=lambda hit: [frozenset(sorted(hit)[:4])]) == first
    ran_ahead = frozenset(sorted(second)[:4])
    assert (ran_ahead, True) in pool.started and ran_ahead in pool.stopped and ran_ahead not in pool.verdicts


def test_the_round_run_ahead_of_a_smaller_candidate_goes_on_while_a_larger_one_fails_first():
    # ResNet-18's relu accuracy on the H200 (every relu fails): of a round's halves, 9 nodes failed 0.3 s before 8.
    # The 8's round, run ahead for 9 s, was dropped for the 9's, and compiled again from the start when the 8 won.
    names, _ = chain(17)
    small, large = frozenset(names[:8]), frozenset(names[8:])
    pool = SimulatedPool(lambda c: "n3" in c or "n12" in c, latency=lambda c: {small: 10.0, large: 9.7}.get(c, 50.0))
    ahead = {hit: frozenset(sorted(hit, key=names.index)[:4]) for hit in (small, large)}
    assert Race(pool).first_failing([small, large], frozenset(names), then=lambda hit: [ahead[hit]]) == small
    assert (ahead[small], True) in pool.started and ahead[small] not in pool.stopped  # started once, still running
    assert ahead[large] in pool.stopped  # the round after the graph not taken


def test_the_failing_candidate_s_round_takes_workers_from_rounds_run_ahead_but_never_from_this_round():
    # a single node of this round is also in the round run ahead of a larger undecided candidate; once the largest
    # fails, its own round needs every worker, and takes them from that run-ahead round, not from this round
    names, _ = chain(8)
    single, three, five = frozenset(["n1"]), frozenset(names[:3]), frozenset(names[3:])
    latency = {five: 1.0, single: 30.0, three: 40.0}
    pool = SimulatedPool(lambda c: "n5" in c, latency=lambda c: latency.get(c, 50.0), workers=4)

    def then(hit):
        return [frozenset([n]) for n in sorted(hit, key=names.index)] if len(hit) > 1 else []

    assert Race(pool).first_failing([single, three, five], frozenset(names), then) == five
    assert [c for c, _ in pool.started].count(single) == 1 and single not in pool.stopped
    assert (frozenset(["n0"]), True) in pool.started and frozenset(["n0"]) in pool.stopped  # ran ahead, yielded


def test_what_ranks_after_a_failing_candidate_is_stopped_before_the_round_ends():
    names, _ = chain(16)
    one, four, six = frozenset(names[:1]), frozenset(names[:4]), frozenset(names[:6])
    stops = {}

    class Timed(SimulatedPool):
        def stop(self, candidate):
            stops[candidate] = self.now
            super().stop(candidate)

    pool = Timed(lambda c: "n3" in c, latency=lambda c: {one: 10.0, four: 1.0, six: 50.0}[c])
    assert Race(pool).first_failing([one, four, six], frozenset(names)) == four
    assert stops == {six: 1.0} and pool.now == 10.0  # its worker is free once the 4 nodes fail


def test_the_round_run_ahead_of_an_earlier_failure_never_stops_what_this_round_still_waits_for():
    # GPT-2 on the H200, single nodes at the end: a 4-node complement fails first and the round after it (its
    # single nodes) runs ahead; then a single node fails, and that run-ahead round is dropped. Its single nodes
    # are also this round's, still compiling: stopping them meant compiling them again (about 10 s there).
    names, _space = chain(5)
    current = frozenset(names)
    singles = [frozenset([n]) for n in names]
    complements = [current - s for s in singles]
    culprit = frozenset(["n2"])
    pool = SimulatedPool(
        lambda c: culprit <= c, latency=lambda c: 60.0 if not culprit <= c else 5.0 if c == culprit else 2.0
    )
    race = Race(pool)

    def then(hit):
        return [c for c in [*(frozenset([n]) for n in sorted(hit)), *(hit - {n} for n in hit)] if len(c) < len(hit)]

    assert race.first_failing([*singles, *complements], current, then) == culprit
    assert singles[1] not in pool.stopped and [c for c, _ in pool.started].count(singles[1]) == 1
    assert pool.now == 60.0  # the passing single nodes before it, compiled once


def test_only_a_compile_error_raised_before_the_build_stops_candidates_there():
    from minifier.contract.signature import ErrorAnalysis, Signature
    from minifier.driver.verdicts import raised_before_build
    from minifier.exchange import worker_protocol as p
    from minifier.processes.pool import Result

    def whole(kind: str, built: bool | None) -> Result:
        error = ErrorAnalysis(Signature("E", "m", kind), "E: m", None)
        outcome = p.Outcome(key="whole", status="raised", seconds=1.0, error=error, built=built)
        return Result(p.QueryRequest(key="whole", program=p.OriginalProgram()), "outcome", 1.0, outcome)

    assert raised_before_build(whole("compile_error", built=False))  # a codegen KeyError
    assert not raised_before_build(whole("compile_error", built=True))  # g++ failed: in the build
    # a compile served from Inductor's cache never reaches the build, and a device-side assert comes at run time
    assert not raised_before_build(whole("runtime_error", built=False))
    assert not raised_before_build(whole("accuracy", built=False))


def minified_demo(room=None):
    """The demo on a 2-core VM: a worker compiles the whole graph (8 s); the kernels' compile error names the
    culprit 4 s in (minifier.processes.cpp_build), while the wrapper compiles. Returns the pool, the whole graph
    and the culprit once the search ended."""
    names, space = chain(3)
    whole, culprit = frozenset(names), frozenset({"n1"})
    latency = lambda c: 8.0 if c == whole else 6.0  # noqa: E731
    pool = QueuedPool(lambda c: "n1" in c, latency, workers=2, leads_at=[(4.0, [culprit])])
    race = Race(pool)
    assert race.verdict(whole, lambda w: opening_round(space, w), room=room) == "fails"
    result = minimize(space, race.winner(whole) or whole, race)
    race.close()
    assert result == culprit
    return pool, whole, culprit


def test_a_lead_takes_the_worker_of_a_candidate_run_ahead_of_its_round():
    # the other worker compiles a single node run ahead of the whole graph's verdict
    pool, whole, culprit = minified_demo()
    [(ahead, background)] = [(c, b) for c, b in pool.started if c != whole][:1]
    assert background and ahead != culprit and ahead in pool.stopped  # it made room for the lead at 4 s...
    assert pool.now == 10.0  # ...which answered at 10 s, not after the run-ahead's 6 s and its own


def test_where_cores_are_short_nothing_runs_ahead_of_the_whole_graph_yet_a_lead_starts_at_once():
    # the demo on a 2-core VM: a single node run ahead beside the whole graph made its compile 9.0 s (7.1 s alone
    # in `run`) and so the kernels' error that names the culprit later; with no room, that error comes as soon
    # as it can and the culprit takes the worker left free
    pool, whole, culprit = minified_demo(room=0)
    assert pool.now == 10.0
    assert pool.started[:2] == [(whole, False), (culprit, True)]  # nothing ran ahead to be stopped for it

    # room for one on four workers: one candidate runs ahead, and the lead still gets a worker of its own
    names, space = chain(8)
    whole, culprit = frozenset(names), frozenset({"n5"})
    latency = lambda c: 5.0 if c == whole else 6.0  # noqa: E731  (nothing run ahead answers before the verdict)
    then, after = (lambda w: opening_round(space, w)), (lambda h: opening_round(space, h))

    def ahead_of(room):
        pool = QueuedPool(lambda c: "n5" in c, latency, workers=4, leads_at=[(4.0, [culprit])])
        assert Race(pool).verdict(whole, then, after, room=room) == "fails" and pool.now == 5.0
        assert (culprit, True) in pool.started and culprit not in pool.stopped
        return [c for c, background in pool.started if background and c != culprit], pool.stopped

    assert ahead_of(room=1) == ([frozenset({"n0"})], [])
    ahead, stopped = ahead_of(room=None)  # every spare worker runs ahead, and the lead takes the youngest's
    assert len(ahead) == 3 and stopped == ahead[-1:]
