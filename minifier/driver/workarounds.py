"""Workarounds: the Inductor config changes that may let a failing graph compile and run, narrowest first,
and the search that tries each on the minimal graph (cheap) and checks those that fix it on the original.

Pure: the configs come as values read from the torch in use (config names differ between versions), and the
trials run through whoever feeds `WorkaroundSearch.answer` (the pool in triage.py, a fake in the tests).
A change is offered only once the original compiled, ran and matched eager with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contract.events import Target, TrialVerdict
from ..contract.signature import Kind

# How much of Inductor a change turns off: 1 one switch of one backend, 2 a whole optimization (a fusion
# limit, vectorization), 3 a stage (every graph pass of a kind), 4 Inductor itself (every op left to ATen).
NARROW, OPTIMIZATION, STAGE, EVERYTHING = 1, 2, 3, 4


@dataclass(frozen=True)
class Toggle:
    name: str
    value: Any
    family: str
    breadth: int
    device: str | None = None  # only where Inductor generates code for it: "cpu" C++, "cuda" Triton


CATALOG: tuple[Toggle, ...] = (
    Toggle("pick_loop_orders", False, "loop order", NARROW),
    Toggle("loop_ordering_after_fusion", False, "loop order", NARROW),
    Toggle("loop_index_inversion_in_fusion", False, "loop order", NARROW),
    Toggle("loop_reindexing_after_fusion", False, "loop order", NARROW),
    Toggle("epilogue_fusion", False, "fusion", NARROW),
    Toggle("prologue_fusion", False, "fusion", NARROW),
    Toggle("aggressive_fusion", False, "fusion", NARROW),
    Toggle("combo_kernels", False, "fusion", NARROW),
    Toggle("cpp.max_horizontal_fusion_size", 1, "fusion", NARROW, "cpu"),
    Toggle("cpp.enable_loop_tail_vec", False, "C++ vectorization", NARROW, "cpu"),
    Toggle("cpp.no_redundant_loops", False, "C++ vectorization", NARROW, "cpu"),
    Toggle("cpp.enable_concat_linear", False, "C++ codegen", NARROW, "cpu"),
    Toggle("cpp.fallback_scatter_reduce_sum", True, "C++ codegen", NARROW, "cpu"),
    Toggle("triton.persistent_reductions", False, "Triton reductions", NARROW, "cuda"),
    Toggle("triton.cooperative_reductions", False, "Triton reductions", NARROW, "cuda"),
    Toggle("triton.autotune_pointwise", False, "Triton autotuning", NARROW, "cuda"),
    Toggle("max_autotune", False, "Triton autotuning", NARROW, "cuda"),
    Toggle("max_autotune_gemm", False, "Triton autotuning", NARROW, "cuda"),
    Toggle("split_reductions", False, "reductions", NARROW),
    Toggle("optimize_scatter_upon_const_tensor", False, "scatter", NARROW),
    Toggle("fallback_random", True, "accuracy", NARROW),
    Toggle("emulate_precision_casts", True, "accuracy", NARROW),
    Toggle("max_fusion_size", 1, "fusion", OPTIMIZATION),
    Toggle("cpp.simdlen", 0, "C++ vectorization", OPTIMIZATION, "cpu"),
    Toggle("inplace_buffers", False, "buffer reuse", OPTIMIZATION),
    Toggle("allow_buffer_reuse", False, "buffer reuse", OPTIMIZATION),
    Toggle("layout_optimization", False, "layout", OPTIMIZATION),
    Toggle("comprehensive_padding", False, "layout", OPTIMIZATION),
    Toggle("shape_padding", False, "layout", OPTIMIZATION),
    Toggle("use_pre_grad_passes", False, "graph passes", STAGE),
    Toggle("use_joint_graph_passes", False, "graph passes", STAGE),
    Toggle("use_post_grad_passes", False, "graph passes", STAGE),
    Toggle("fallback_by_default", True, "ATen fallback", EVERYTHING),
)

# The families worth trying for a failure of each kind, the most likely first (ties of breadth go to it); the
# others are not tried: on CPU a minimal graph's compile that fails in g++ costs seconds, and a random-number or
# padding switch does not change the C++ a codegen bug writes. Inductor with every op left to ATen always is.
FAMILIES: dict[str, tuple[str, ...]] = {
    "compile_error": (
        "graph pass",
        "loop order",
        "fusion",
        "C++ vectorization",
        "C++ codegen",
        "Triton reductions",
        "Triton autotuning",
        "reductions",
        "scatter",
        "graph passes",
    ),
    "runtime_error": (
        "graph pass",
        "buffer reuse",
        "scatter",
        "layout",
        "fusion",
        "loop order",
        "C++ codegen",
        "Triton reductions",
        "Triton autotuning",
        "graph passes",
    ),
    "accuracy": (
        "accuracy",
        "C++ vectorization",
        "Triton reductions",
        "reductions",
        "fusion",
        "loop order",
        "layout",
        "graph pass",
        "graph passes",
    ),
}
FAMILIES["crash"] = FAMILIES["timeout"] = FAMILIES["runtime_error"]
ALWAYS = "ATen fallback"
# A config the user set (launcher.config, a compile's patches) back at its default: tried first, for every kind of
# failure. A debug switch may be what meets the bug (triton.debug_sync_graph writes Python into AOTI's C++).
YOURS = "a setting of yours"


@dataclass(frozen=True)
class Change:
    """Inductor configs to compile with (what `inductor_configs=` gets); ops whose lowering is left to ATen
    inside the compile (`aten_fallback`: it names the culprit's subsystem, it is never offered); or one op whose
    lowering the user's process leaves to ATen (`fallback`: offered as `code` run before compiling)."""

    configs: tuple[tuple[str, Any], ...] = ()
    family: str = ""
    breadth: int = NARROW
    then: tuple[Change, ...] = ()  # narrower changes worth trying once this one fixes (one pass of a group)
    aten_fallback: tuple[str, ...] = ()
    fallback: str = ""

    @property
    def inductor_configs(self) -> dict[str, Any]:
        return dict(self.configs)

    @property
    def code(self) -> str:
        return fallback_code(self.fallback) if self.fallback else ""

    def describe(self) -> str:
        if self.aten_fallback:
            return "lowering left to ATen: " + ", ".join(self.aten_fallback)
        if self.fallback:
            return f"make_fallback({self.fallback}) before compiling"
        return ", ".join(f"{k}={v!r}" for k, v in self.configs) or "no change"

    def key(self) -> str:
        return json.dumps([self.configs, self.aten_fallback, self.fallback], sort_keys=True, default=str)


def fallback_code(op: str) -> str:
    """What a user runs once before compiling so that Inductor leaves `op` (`aten.any.dim`) to its ATen kernel:
    the registration Inductor itself uses for the ops it does not lower. `warn=False`: with CI set in the
    environment, make_fallback raises for an op that has a decomposition (most have one)."""
    if not OP_NAME.fullmatch(op):
        raise ValueError(f"not an op's name: {op!r}")
    return (
        "from torch._inductor.lowering import make_fallback\n"
        f"make_fallback(torch.ops.{op}, warn=False)  # Inductor's lowering of {op} is avoided: ATen's kernel runs it"
    )


NO_CHANGE = Change()
OP_NAME = re.compile(r"\w+\.\w+(\.\w+)?")  # `aten.any.dim`, as torch.ops names it


def candidates(
    values: Mapping[str, Any],
    device: str,
    kind: Kind,
    passes: Sequence[str] = (),
    settings: Mapping[str, Any] | None = None,
) -> list[Change]:
    """The changes worth trying on this torch for a failure of `kind` on `device`, narrowest first: each of the
    user's `settings` back at its default; each catalog switch of a family that fits, that this torch has and that
    is not already set so; and, where the failing compile applied graph passes, all of them disabled at once (then
    each alone, should that fix it)."""
    backend = "cuda" if device.startswith("cuda") else "cpu"
    fits = (*FAMILIES.get(kind, ()), ALWAYS)
    settings = settings or {}
    found = [Change(((name, default),), YOURS, NARROW) for name, default in settings.items()]
    found += [
        Change(((t.name, t.value),), t.family, t.breadth)
        for t in CATALOG
        if t.family in fits
        and t.name in values
        and values[t.name] != t.value
        and t.device in (None, backend)
        and (t.name not in settings or settings[t.name] != t.value)  # reverting the user's setting tries it
    ]
    named = [name for name in dict.fromkeys(passes) if name]
    if named and "disabled_passes" in values and "graph passes" in fits:
        singles = tuple(
            Change((("disabled_passes", _merged(values["disabled_passes"], [name])),), "graph pass", NARROW)
            for name in named
        )
        group = (("disabled_passes", _merged(values["disabled_passes"], named)),)
        found.append(Change(group, "graph passes", STAGE, then=singles if len(singles) > 1 else ()))
    return rank(found, kind)


def rank(changes: Sequence[Change], kind: Kind) -> list[Change]:
    fit = FAMILIES.get(kind, ())

    def order(change: Change) -> tuple[int, int]:
        if change.family == YOURS:
            return change.breadth, -1
        return change.breadth, fit.index(change.family) if change.family in fit else len(fit)

    return sorted(changes, key=order)  # stable: the catalog's order within a tie


def _merged(existing: Any, names: Sequence[str]) -> str:
    """`disabled_passes` is one comma-separated string; what the user disables already stays."""
    kept = [n for n in str(existing or "").split(",") if n]
    return ",".join(kept + [n for n in names if n not in kept])


@dataclass(frozen=True)
class Trial:
    change: Change
    on: Target


@dataclass(frozen=True)
class Answer:
    verdict: TrialVerdict  # "fixes": it compiled and ran (on the original: and matched eager)
    seconds: float
    max_abs_error: float | None = None
    detail: str = ""


@dataclass
class Found:
    verified: list[tuple[Change, Answer]] = field(default_factory=list)  # narrowest first
    rejected: list[tuple[Change, Answer]] = field(default_factory=list)  # fixed the minimal graph only
    tried: int = 0  # changes tried on the minimal graph


class WorkaroundSearch:
    """Every change is tried on the minimal graph at once (the pool runs them in this order); each that fixes
    it is checked on the original, narrowest first, `verify` of them at most, the next one taking the place
    of one the original rejects."""

    def __init__(self, changes: Sequence[Change], verify: int) -> None:
        self.changes = list(changes)
        self.verify = verify
        self.order = {c.key(): i for i, c in enumerate(self.changes)}
        self.waiting: list[Change] = []  # fixed the minimal graph, not yet checked on the original
        self.in_flight: set[Trial] = set()
        self.fixed: set[str] = set()  # the changes that fixed the minimal graph
        self.found = Found()

    def opening(self) -> list[Trial]:
        return self._start([Trial(c, "minimal") for c in self.changes])

    def answer(self, trial: Trial, answer: Answer) -> list[Trial]:
        """Take one trial's answer; returns the trials to start now."""
        self.in_flight.discard(trial)
        started: list[Trial] = []
        if trial.on == "minimal":
            self.found.tried += 1
            if answer.verdict == "fixes":
                self.fixed.add(trial.change.key())
                self.waiting.append(trial.change)
                started += self._add(trial.change.then)
        elif answer.verdict == "fixes":
            self.found.verified.append((trial.change, answer))
        else:
            self.found.rejected.append((trial.change, answer))
        return started + self._verify_next()

    def found_elsewhere(self, change: Change) -> list[Trial]:
        """A change that fixed the minimal graph outside this search (one op left to ATen, by the culprit's
        probes): the narrowest there is, it ranks ahead of every config and is checked on the original as they
        are."""
        self.order[change.key()] = -2
        self.changes.append(change)
        self.fixed.add(change.key())
        self.waiting.append(change)
        return self._verify_next()

    def needless(self) -> list[Trial]:
        """Once `verify` workarounds are verified, the minimal-graph trials still running: they run in rank
        order, so none of them is narrower than what was found. They are dropped, and not counted as tried."""
        if len(self.found.verified) < self.verify:
            return []
        dropped = [t for t in self.in_flight if t.on == "minimal"]
        self.in_flight.difference_update(dropped)
        return dropped

    @property
    def finished(self) -> bool:
        return not self.in_flight

    def result(self) -> Found:
        position = self.order.get
        self.found.verified.sort(key=lambda found: position(found[0].key(), len(self.order)))
        return self.found

    def _add(self, changes: Sequence[Change]) -> list[Trial]:
        new = [c for c in changes if c.key() not in self.order]
        for change in new:
            self.order[change.key()] = -1  # a narrower change found inside a group ranks ahead of everything
        self.changes += new
        return self._start([Trial(c, "minimal") for c in new])

    def _verify_next(self) -> list[Trial]:
        checking = sum(1 for t in self.in_flight if t.on == "original")
        room = self.verify - len(self.found.verified) - checking
        # a group waits for its parts: one of them alone is the narrower workaround, and then the group is none
        self.waiting = [c for c in self.waiting if not any(t.key() in self.fixed for t in c.then)]
        ready = [c for c in self.waiting if not any(Trial(t, "minimal") in self.in_flight for t in c.then)]
        if room <= 0 or not ready:
            return []
        chosen = sorted(ready, key=lambda c: (self.order[c.key()], c.breadth))[:room]
        self.waiting = [c for c in self.waiting if c not in chosen]
        return self._start([Trial(c, "original") for c in chosen])

    def _start(self, trials: list[Trial]) -> list[Trial]:
        self.in_flight.update(trials)
        return trials
