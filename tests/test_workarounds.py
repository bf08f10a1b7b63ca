"""The workaround search alone (minifier.driver.workarounds), with a fake oracle: which changes are tried, in
what order, and that nothing is listed before the original has passed with it."""

from __future__ import annotations

from collections.abc import Callable

from minifier.contract import wire
from minifier.contract.events import (
    Culprit,
    Signature,
    Triage,
    TriageEvent,
    TrialEvent,
    Workaround,
    encode_event,
    ends,
    parse_event,
)
from minifier.contract.events import DoneEvent as Done
from minifier.driver.triage import as_lowered
from minifier.driver.workarounds import (
    EVERYTHING,
    NARROW,
    YOURS,
    Answer,
    Change,
    Found,
    Trial,
    WorkaroundSearch,
    candidates,
)

# What torch 2.13 reports for the configs the catalog names (its defaults), and one it does not have.
VALUES = {
    "pick_loop_orders": True,
    "epilogue_fusion": True,
    "max_fusion_size": 64,
    "cpp.simdlen": None,
    "triton.persistent_reductions": True,
    "fallback_random": False,
    "fallback_by_default": False,
    "aggressive_fusion": False,  # already what the catalog would set: no change to try
    "disabled_passes": "",
}


def names(changes: list[Change]) -> list[str]:
    return [",".join(k for k, _ in c.configs) for c in changes]


def test_candidates_are_the_configs_this_torch_has_narrowest_first():
    found = candidates(VALUES, "cpu", "compile_error")
    order = names(found)
    assert order == ["pick_loop_orders", "epilogue_fusion", "max_fusion_size", "cpp.simdlen", "fallback_by_default"]
    assert "aggressive_fusion" not in order  # already False
    assert "triton.persistent_reductions" not in order  # a CPU failure: no Triton kernel to change
    assert "loop_ordering_after_fusion" not in order  # not a config of this torch
    assert order[-1] == "fallback_by_default"  # every op to ATen: the broadest, last
    assert [c.breadth for c in found] == sorted(c.breadth for c in found)
    assert found[-1].breadth == EVERYTHING and found[0].breadth == NARROW


def test_the_failure_kind_picks_and_orders_the_families():
    compile_order = names(candidates(VALUES, "cpu", "compile_error"))
    accuracy_order = names(candidates(VALUES, "cpu", "accuracy"))
    assert "fallback_random" not in compile_order  # no random numbers in what g++ rejects
    assert accuracy_order.index("fallback_random") < accuracy_order.index("pick_loop_orders")


def test_the_users_own_settings_are_reverted_first_and_not_tried_twice():
    """A debug switch of the user's (triton.debug_sync_graph writes Python into AOTI's C++ wrapper) whatever the
    kind; a setting the catalog would try anyway (epilogue_fusion back to its default, False) is tried once."""
    settings = {"triton.debug_sync_graph": False, "epilogue_fusion": False}
    found = candidates({**VALUES, "triton.debug_sync_graph": True}, "cpu", "accuracy", settings=settings)
    assert names(found)[:2] == ["triton.debug_sync_graph", "epilogue_fusion"]
    assert names(found).count("epilogue_fusion") == 1 and found[0].family == found[1].family == YOURS
    assert found[0].inductor_configs == {"triton.debug_sync_graph": False}


def test_a_cuda_failure_tries_triton_switches_and_no_cpp_ones():
    order = names(candidates(VALUES, "cuda:0", "compile_error"))
    assert "triton.persistent_reductions" in order and "cpp.simdlen" not in order


def test_passes_the_failing_compile_applied_are_disabled_together_then_alone():
    values = {**VALUES, "disabled_passes": "user_pass"}
    [group] = [c for c in candidates(values, "cpu", "compile_error", ["a", "b", "a"]) if c.family == "graph passes"]
    assert group.inductor_configs == {"disabled_passes": "user_pass,a,b"}  # the user's own stays disabled
    assert [c.inductor_configs for c in group.then] == [
        {"disabled_passes": "user_pass,a"},
        {"disabled_passes": "user_pass,b"},
    ]


def run(search: WorkaroundSearch, oracle: Callable[[Trial], Answer]) -> tuple[Found, list[Trial]]:
    """Answer the search's trials one at a time, as the pool of one worker would run them: checks on the original
    first (the foreground), trials on the minimal graph in the order they were started."""
    queue = search.opening()
    asked = []
    while queue:
        trial = next((t for t in queue if t.on == "original"), queue[0])
        queue.remove(trial)
        asked.append(trial)
        queue += search.answer(trial, oracle(trial))
        stopped = search.needless()
        queue = [t for t in queue if t not in stopped]
    assert search.finished
    return search.result(), asked


def change(name: str, breadth: int = NARROW, **more) -> Change:
    return Change(((name, False),), "fusion", breadth, **more)


def fixes_on(minimal: set[str], original: set[str]) -> Callable[[Trial], Answer]:
    def oracle(trial: Trial) -> Answer:
        fixed = trial.change.describe() in (minimal if trial.on == "minimal" else original)
        return Answer("fixes" if fixed else "fails", 1.0, 0.0 if fixed else None)

    return oracle


def test_only_what_the_original_passes_with_is_listed_narrowest_first():
    a, b, c, d = change("a"), change("b"), change("c", 2), change("d", 3)
    found, asked = run(
        WorkaroundSearch([a, b, c, d], verify=2),
        fixes_on(minimal={"a=False", "c=False", "d=False"}, original={"c=False", "d=False"}),
    )
    assert [w.describe() for w, _ in found.verified] == ["c=False", "d=False"]
    assert [w.describe() for w, _ in found.rejected] == ["a=False"]  # fixed the minimal graph, not the model
    assert found.tried == 4
    # b never fixed the minimal graph: never compiled on the original
    assert Trial(b, "original") not in asked


def test_once_enough_are_verified_no_broader_change_is_compiled():
    changes = [change(n) for n in "abcdef"]
    found, asked = run(WorkaroundSearch(changes, verify=1), fixes_on({"a=False", "b=False", "c=False"}, {"a=False"}))
    assert [w.describe() for w, _ in found.verified] == ["a=False"]
    assert [t.change.describe() for t in asked if t.on == "original"] == ["a=False"]
    # a's check on the original went ahead of b; once it passed, b to f were dropped
    assert [t.change.describe() for t in asked if t.on == "minimal"] == ["a=False"]
    assert found.tried == 1


def test_nothing_fixes_an_honest_empty_result():
    found, asked = run(WorkaroundSearch([change("a"), change("b")], verify=2), fixes_on(set(), set()))
    assert found.verified == [] and found.tried == 2
    assert all(t.on == "minimal" for t in asked)


def test_a_group_waits_for_its_parts_and_a_part_that_fixes_replaces_it():
    one, two = change("p1"), change("p2")
    group = Change((("disabled_passes", "p1,p2"),), "graph passes", 3, then=(one, two))
    found, asked = run(
        WorkaroundSearch([group], verify=2),
        fixes_on({"disabled_passes='p1,p2'", "p2=False"}, {"disabled_passes='p1,p2'", "p2=False"}),
    )
    assert [w.describe() for w, _ in found.verified] == ["p2=False"]
    assert Trial(group, "original") not in asked  # its part alone is the narrower workaround


def test_triage_json_and_its_events_round_trip():
    triage = Triage(
        signature=Signature("KeyError", "'buf<n>'", "compile_error"),
        workarounds=[Workaround({"pick_loop_orders": False}, "loop order", 5.2, 1.2e-07)],
        tried=25,
        culprit=Culprit(["aten.index_put_.default"], "codegen", "loop order", "avoided by pick_loop_orders=False"),
        deterministic=True,
        runs=2,
        failures=2,
        repro="/dump/repro.py",
    )
    assert wire.decode(Triage, wire.encode(triage)) == triage
    event = TriageEvent(path="/dump/triage.json", triage=triage)
    assert parse_event(encode_event(event)) == event
    trial = TrialEvent({"max_fusion_size": 1}, "original", "fixes", 5.4)
    assert parse_event(encode_event(trial)) == trial


def test_a_triage_goes_on_after_the_done_of_the_minify_it_started():
    done = Done(nodes=1, repro="/dump/repro.py", queries=3, seconds=1.0)
    assert ends(done, "minify") and not ends(done, "triage")


def test_an_in_place_op_is_left_to_aten_in_the_form_inductor_lowers():
    assert as_lowered(("aten.relu_.default", "aten.add.Tensor", "aten._to_copy.default")) == [
        "aten.relu_.default",
        "aten.relu.default",
        "aten.add.Tensor",
        "aten._to_copy.default",
    ]


def test_no_change_is_compiled_twice():
    """A group's part that is also a change of its own is tried once (its answer serves both)."""
    alone = change("p1")
    group = Change((("disabled_passes", "p1,p2"),), "graph passes", 3, then=(alone, change("p2")))
    found, asked = run(WorkaroundSearch([alone, group], verify=2), fixes_on({"disabled_passes='p1,p2'"}, set()))
    minimal = [t.change.describe() for t in asked if t.on == "minimal"]
    assert sorted(minimal) == sorted(set(minimal)) and "p1=False" in minimal and "p2=False" in minimal
    assert found.tried == 3
