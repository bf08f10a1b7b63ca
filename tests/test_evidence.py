"""The sources of evidence raced beside the search (minifier/driver/evidence.py), on a simulated pool: which queries
each owns, and the leads each answer brings."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from minifier.contract.signature import KernelRef
from minifier.driver.accuracy_probe import PROBE_KEY, AccuracyProbe
from minifier.driver.evidence import Context
from minifier.driver.kernel_evidence import KernelEvidence
from minifier.driver.reporter import Reporter
from minifier.driver.search import Space, make_closure
from minifier.exchange import worker_protocol as p
from minifier.processes.pool import Result

#  x -> a = linear(x, w) -> b = relu(a) -> c = sigmoid(b) -> d = mul(c, c); e = t(w) from the weight alone
NODES = [
    p.NodeInfo("x", "input", "x", "", [], True),
    p.NodeInfo("w", "param", "w", "", [], True),
    p.NodeInfo("e", "compute", "aten.t.default", "t", ["w"], True),
    p.NodeInfo("a", "compute", "aten.linear.default", "linear", ["x", "e"], True),
    p.NodeInfo("b", "compute", "aten.relu.default", "relu", ["a"], True),
    p.NodeInfo("c", "compute", "aten.sigmoid.default", "sigmoid", ["b"], True),
    p.NodeInfo("d", "compute", "aten.mul.Tensor", "mul", ["c", "c"], True),
]
GRAPH = p.GraphInfo(NODES, ["d"], "", "2.13.0", "cpu")


@dataclass
class SimulatedPool:
    """What the sources ask of a pool: queries submitted and cancelled, by key."""

    submitted: list[tuple[p.Query, bool]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    def submit(self, query: p.Query, background: bool = False, **_: object) -> None:
        self.submitted.append((query, background))

    def cancel(self, key: str) -> None:
        self.cancelled.append(key)


def context(slicing: bool = True, accuracy: str = "") -> tuple[Context, SimulatedPool]:
    pool = SimulatedPool()
    session = SimpleNamespace(
        options=SimpleNamespace(slicing=slicing), accuracy=accuracy, layout=SimpleNamespace(values="/v.pt")
    )
    compute = GRAPH.compute_nodes()
    space = Space(order=compute, closure=make_closure(GRAPH.compute_args(), set(compute)))
    return Context(session, pool, Reporter(False), space, GRAPH), pool  # type: ignore[arg-type]


def result(query: p.Query, outcome: p.Outcome | None = None, kind: str = "outcome") -> Result:
    return Result(query, kind, 1.0, outcome)  # type: ignore[arg-type]


def test_a_kernel_fused_from_several_nodes_leads_to_them_together_and_once():
    evidence = KernelEvidence(context()[0])
    kernel = KernelRef(name="cpp_fused_relu_sigmoid_0", source_nodes=["b", "c"], exact=True, fused=True)
    assert evidence.leads(kernel, {}) == [frozenset({"b", "c"})]  # no one node of a fused failure alone
    assert evidence.together == [frozenset({"b", "c"})]
    # known now: the kernels that did not compile, told later, bring nothing more
    failed = result(p.QueryRequest("whole", p.OriginalProgram()), kind="kernel_failed")
    assert evidence.owns(failed) and evidence.answer(failed) == []


def test_a_kernel_of_exact_nodes_not_fused_leads_to_each_and_then_to_all():
    evidence = KernelEvidence(context()[0])
    leads = evidence.leads(KernelRef(name="cpp_relu_sigmoid", source_nodes=["b", "c"], exact=True), {})
    assert set(leads) == {frozenset({"b"}), frozenset({"c"}), frozenset({"b", "c"})}
    assert leads[-1] == frozenset({"b", "c"}) and evidence.together == []


def test_a_compile_that_raised_before_any_kernel_races_what_the_weights_alone_compute():
    evidence = KernelEvidence(context()[0])
    assert evidence.from_constants() == [frozenset({"e"})]
    assert KernelEvidence(context(slicing=False)[0]).from_constants() == []


def test_the_probe_leads_to_the_first_diverging_node_alone_then_its_widest_ring():
    probe = AccuracyProbe(context()[0], dict)
    answer = result(
        p.ProbeRequest(PROBE_KEY, "/v.pt"),
        p.Outcome(PROBE_KEY, "passed", 1.0, findings=p.Divergence(["c", "d"])),
    )
    assert probe.owns(answer) and not KernelEvidence(context()[0]).owns(answer)
    assert probe.answer(answer) == [frozenset({"c"}), frozenset({"a", "b", "c"}), frozenset({"b", "c"})]
    assert probe.probed == probe.answer(answer)


def test_a_probe_that_finds_nothing_brings_no_leads():
    probe = AccuracyProbe(context()[0], dict)
    nothing = result(p.ProbeRequest(PROBE_KEY, "/v.pt"), p.Outcome(PROBE_KEY, "passed", 1.0))
    assert probe.answer(nothing) == [] and probe.probed == []


def test_the_probe_starts_in_the_background_only_with_slicing_and_stops_by_its_key():
    on, pool = context()
    probe = AccuracyProbe(on, dict)
    assert probe.start()
    [(query, background)] = pool.submitted
    assert query == p.ProbeRequest(PROBE_KEY, "/v.pt") and background
    probe.stop()
    assert pool.cancelled == [PROBE_KEY]
    off, idle = context(slicing=False)
    assert not AccuracyProbe(off, dict).start() and idle.submitted == []
