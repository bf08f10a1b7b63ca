"""The search over node sets, with oracles that stand for known bug shapes."""

from minifier.search import Space, make_closure, minimize, smallest_failure_known


class CountingOracle:
    def __init__(self, fails):
        self.fails = fails
        self.seen = {}

    def first_failing(self, candidates):
        for c in candidates:
            self.seen.setdefault(c, self.fails(c))
        failing = [c for c in candidates if self.seen[c]]
        return min(failing, key=len) if failing else None


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
    calls = []

    class Recorder(CountingOracle):
        def first_failing(self, candidates):
            calls.append(min(len(c) for c in candidates))
            return super().first_failing(candidates)

    minimize(space, frozenset(names), Recorder(lambda c: "n9" in c), max_granularity=4)
    assert calls[0] == 4
    calls.clear()
    minimize(space, frozenset(names), Recorder(lambda c: "n9" in c))
    assert calls[0] == 16


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
