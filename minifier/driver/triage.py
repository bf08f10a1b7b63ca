"""`aoti-minify triage`: after the minimal repro, what the person whose model fails needs next: a workaround
verified on their own model, and the culprit inside Inductor named.

On the minimal graph (minified first when there is no repro.py yet) one compile names the failure's phase and
the graph passes it applied; then every config change that fits (workarounds.py) is tried there, in parallel on
the pool, and each that fixes it is checked on the original: compiled, loaded, run and compared with eager at
the launcher's tolerance. Beside them the minimal graph's ops are compiled with their lowering left to ATen
(CompilerBisector's switch, minifier.processes.switches) to name the op whose lowering fails, and the original
is run again, unchanged, to tell a deterministic failure from a flaky one. The result is triage.json beside
repro.py and a `triage` event.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from dataclasses import dataclass, replace

from ..contract import wire
from ..contract.artifacts import read_repro_graph, repro_stopped, write_text
from ..contract.events import (
    Culprit,
    FakeMismatch,
    Rejected,
    Triage,
    TriageEvent,
    TrialEvent,
    TrialVerdict,
    Verdict,
    Workaround,
)
from ..contract.signature import Signature
from ..exchange import worker_protocol as p
from ..processes.pool import Pool, Result
from . import devices
from .minify import DoesNotFail, minify
from .reporter import Reporter
from .reproduce import fake_kernel_lies
from .session import Session
from .verdicts import classify, one_line, raised_before_build, result_signature
from .workarounds import NARROW, NO_CHANGE, OP_NAME, Answer, Change, Trial, WorkaroundSearch, candidates

_OP = re.compile(r"torch\.ops\.([\w]+\.[\w]+\.[\w]+)\(")
_FRAME = re.compile(r'File "([^"]+)", line \d+')
# Where in torch a failure's innermost frame lies says the phase it failed in (the innermost match wins).
_PHASES = (
    ("/torch/export/", "export"),
    ("/_inductor/fx_passes/", "graph pass"),
    ("/_inductor/pattern_matcher.py", "graph pass"),
    ("/_inductor/lowering.py", "lowering"),
    ("/_inductor/graph.py", "lowering"),
    ("/_inductor/ir.py", "lowering"),
    ("/_inductor/scheduler.py", "scheduling"),
    ("/_inductor/codegen/", "codegen"),
    ("/_inductor/codecache.py", "C++ compile"),
    ("/_inductor/cpp_builder.py", "C++ compile"),
    ("/_inductor/package/", "load"),
)


@dataclass(frozen=True)
class Probe:
    """A query of triage's own: a trial (a config change, or ops left to ATen), or (None) an unchanged rerun."""

    trial: Trial | None = None


def triage(session: Session, reporter: Reporter) -> Triage:
    started = time.monotonic()
    pool = session.pool(size=max(1, session.options.workers))
    try:
        if not _minimal_repro(session):
            reporter.say("no minimal repro yet: minifying first")
            minify(session, reporter, pool)
        found = Triaging(session, pool, reporter).run()
    finally:
        pool.close()
    result = replace(found, seconds=round(time.monotonic() - started, 2))
    write_text(session.layout.triage_json, wire.dumps(result) + "\n")
    reporter.emit(TriageEvent(path=session.layout.triage_json, triage=result))
    return result


def _minimal_repro(session: Session) -> bool:
    repro = session.layout.repro_py
    return os.path.exists(repro) and os.path.exists(session.layout.repro_pt2) and not repro_stopped(repro)


def minimal_ops(repro: str) -> list[str]:
    """The ops of the minimal graph, in order, from the graph written at the top of repro.py."""
    return list(dict.fromkeys(_OP.findall(read_repro_graph(repro) or "")))


def as_lowered(ops: tuple[str, ...]) -> list[str]:
    """The ops as Inductor lowers them: an in-place op of the exported graph (`aten.relu_.default`, as torchvision's
    ReLU(inplace=True) exports) reaches the lowering functionalized (`aten.relu.default`)."""
    lowered = []
    for op in ops:
        lowered.append(op)
        namespace, name, overload = op.split(".")
        if name.endswith("_") and not name.startswith("_"):
            lowered.append(f"{namespace}.{name[:-1]}.{overload}")
    return list(dict.fromkeys(lowered))


def phase_of(result: Result, signature: Signature) -> str:
    """The step of Inductor the failure happened in, from its innermost frame inside torch."""
    if signature.kind == "accuracy":
        return "accuracy"
    if signature.kind in ("crash", "timeout"):
        return "run"
    if signature.exc_type == "CppCompileError":
        return "C++ compile"
    text = result.outcome.text if result.outcome else ""
    for path in reversed(_FRAME.findall(text)):
        for marker, phase in _PHASES:
            if marker in path:
                return phase
    return "compile" if signature.kind == "compile_error" else "run"


class Triaging:
    """One triage over the pool: every query goes out at once, answers are taken as they come."""

    def __init__(self, session: Session, pool: Pool, reporter: Reporter) -> None:
        self.session = session
        self.pool = pool
        self.reporter = reporter
        self.layout = session.layout
        self.ops = minimal_ops(self.layout.repro_py)
        self.queries: dict[str, Probe] = {}
        self.keys: dict[Trial, str] = {}
        self.numbers = itertools.count(1)
        self.answers: dict[Trial, Answer] = {}
        self.target: Signature | None = None
        self.runs: list[Verdict] = []
        self.lies: list[FakeMismatch] = []
        self.lowered: list[str] = []
        self.probes: list[Change] = []  # groups of ops left to ATen, tried in turn
        self.failing_code: str | None = None
        self.stop_at_build = False  # the failure raises before the code is built: a change that gets there avoids it
        self.original_need = 0  # the GPU bytes a run of the original asks for (devices.need), its comparison aside
        self.compared_need = 0  # and one compared with eager (devices.reference_need beside it)

    def run(self) -> Triage:
        graph = self.pool.call(p.DescribeRequest()).graph
        devices.plan_gpu_memory(self.pool, graph, self.session.spec)
        self.original_need = devices.need(graph, None, held=bool(self.pool.holders))
        self.compared_need = self.original_need + devices.reference_need(graph)
        configs = self.pool.call(p.ConfigsRequest())
        baseline = self.baseline()  # beside it, on another worker: the eager run that catches a lying fake kernel
        self.target, _ = result_signature(baseline)
        if self.target is None or self.verdict(baseline) != "fails":
            raise DoesNotFail(f"the minimal repro does not fail here: {one_line(baseline) or 'it ran'}")
        # a change that leaves Inductor's code as the baseline's is not compiled: it fails as the baseline did
        recorded = baseline.outcome.trial() if baseline.outcome else p.TrialFindings()
        self.failing_code = recorded.generated
        # a change the minimal graph gets past its failure with is checked on the original by a full compile anyway
        self.stop_at_build = raised_before_build(baseline)
        phase = phase_of(baseline, self.target)
        # the ops Inductor lowered (decompositions applied: mish's log1p, relu_ as relu), else the graph's own
        self.lowered = list(dict.fromkeys(recorded.lowered)) or self.ops
        # no config makes compiled code right that was told wrong sizes: the fix is the user's fake kernel
        changes = (
            []
            if self.lies
            else candidates(configs.values, graph.device, self.target.kind, recorded.passes, configs.settings)
        )
        self.reporter.say(
            f"triage: {self.target.describe()} ({phase}); trying {len(changes)} config changes on the minimal graph"
            + (f" ({self.lies[0].describe()})" if self.lies else "")
        )
        search = WorkaroundSearch(changes, self.session.options.verify)
        # the graph's ops left to ATen first; failing that, the ops Inductor lowered after its decompositions
        self.probes = [Change(aten_fallback=tuple(ops), family="lowering") for ops in (self.ops, self.lowered) if ops]
        self.probes = list(dict.fromkeys(self.probes))
        first = [Trial(self.probes[0], "minimal")] if self.probes and not self.lies else []
        self.start(first + search.opening())
        self.rerun_original()
        while not search.finished or self.pool.in_flight():
            for result in self.pool.wait():
                self.take(result, search)
            self.reporter.memory(self.pool.waiting_for_memory(), self.pool.memory_detail)
            for trial in search.needless():
                self.pool.cancel(self.keys.pop(trial))
        found = search.result()
        return Triage(
            signature=self.target,
            workarounds=[_workaround(c, a) for c, a in found.verified],
            tried=found.tried,
            culprit=self.culprit(phase),
            deterministic=bool(self.runs) and all(v == "fails" for v in self.runs),
            runs=len(self.runs),
            failures=sum(v == "fails" for v in self.runs),
            repro=self.layout.repro_py,
            rejected=[Rejected(c.inductor_configs, a.detail or a.verdict) for c, a in found.rejected],
            torch_version=graph.torch_version,
        )

    def baseline(self) -> Result:
        """The minimal graph as it is, naming the passes its compile applies; meanwhile the original runs eagerly
        once, each value checked against what its fake kernel told export (a custom op's `register_fake` that
        lies makes compiled code wrong, whatever Inductor does)."""
        key = "triage-minimal"
        self.pool.submit(self._minimal_query(key, NO_CHANGE, record_compile=True))
        self.lies = [m for m in fake_kernel_lies(self.pool, self.session, self.reporter) if m.op in self.ops]
        while self.pool.in_flight():
            for result in self.pool.wait():
                if result.query.key == key:
                    return result
        raise RuntimeError("the minimal graph's compile gave no answer")

    def rerun_original(self) -> None:
        """The original's unchanged runs, behind the minimal graph's trials; the run that wrote failure.json
        is one of them, when it saw this failure."""
        saved = self.session.saved_failure()
        if saved is not None and self.target is not None and self.target.matches(saved.signature):
            self.runs.append("fails")
        for run in range(len(self.runs) + 1, self.session.options.runs + 1):
            query = p.QueryRequest(key=f"triage-run-{run}", program=p.OriginalProgram())
            self.submit(query, Probe(), background=True, need=self.original_need)

    def take(self, result: Result, search: WorkaroundSearch) -> None:
        probe = self.queries.pop(result.query.key, None)
        if probe is None:
            return
        if probe.trial is None:
            self.take_run(result)
            return
        trial = probe.trial
        self.keys.pop(trial, None)
        answer = self.answer(trial, result)
        self.answers[trial] = answer
        if trial.change.aten_fallback:
            self.start(self.next_probes(trial.change, answer))
            [op, *others] = trial.change.aten_fallback
            if answer.verdict == "fixes" and not others and OP_NAME.fullmatch(op):
                self.start(search.found_elsewhere(Change(fallback=op, family="ATen fallback", breadth=NARROW)))
            return
        self.start(search.answer(trial, answer))

    def next_probes(self, probe: Change, answer: Answer) -> list[Trial]:
        """After a group of ops left to ATen: each op alone where the group fixed it, else the next group."""
        if probe not in self.probes:
            return []
        ops = probe.aten_fallback
        if answer.verdict == "fixes":
            return (
                [Trial(Change(aten_fallback=(op,), family="lowering"), "minimal") for op in ops] if len(ops) > 1 else []
            )
        later = self.probes[self.probes.index(probe) + 1 :]
        return [Trial(later[0], "minimal")] if later else []

    def take_run(self, result: Result) -> None:
        verdict = self.verdict(result)
        self.runs.append(verdict)
        self.emit(TrialEvent({}, "original", verdict, round(result.seconds, 2), one_line(result)))

    def answer(self, trial: Trial, result: Result) -> Answer:
        verdict = self.verdict(result)
        says: TrialVerdict = "fixes" if verdict == "passes" else verdict
        outcome = result.outcome
        answer = Answer(
            verdict=says,
            seconds=round(result.seconds, 2),
            max_abs_error=outcome.trial().max_abs_error if outcome else None,
            detail=one_line(result),
        )
        self.emit(
            TrialEvent(
                trial.change.inductor_configs,
                trial.on,
                says,
                answer.seconds,
                answer.detail,
                list(trial.change.aten_fallback),
                trial.change.fallback,
            )
        )
        return answer

    def verdict(self, result: Result) -> Verdict:
        return classify(result, self.target, self.session.check_str)

    def start(self, trials: list[Trial]) -> None:
        for trial in trials:
            key = f"triage-{next(self.numbers)}-{trial.on}"
            self.keys[trial] = key
            if trial.on == "minimal":  # in the background: a check on the original goes first, it may end the search
                self.submit(self._minimal_query(key, trial.change), Probe(trial=trial), background=True)
            else:
                query = p.QueryRequest(
                    key=key,
                    program=p.OriginalProgram(),
                    trial=p.TrialOptions(configs=trial.change.inductor_configs, compare=True, setup=trial.change.code),
                )
                self.submit(query, Probe(trial=trial), need=self.compared_need)

    def submit(self, query: p.QueryRequest, probe: Probe, background: bool = False, need: int = 0) -> None:
        """`need`: the GPU bytes it asks for (Pool.submit), for a query of the original; one of the minimal graph
        takes little."""
        self.queries[query.key] = probe
        self.pool.submit(query, background, need=need)

    def _minimal_query(self, key: str, change: Change, record_compile: bool = False) -> p.QueryRequest:
        return p.QueryRequest(
            key=key,
            program=p.SavedProgram(self.layout.repro_pt2),
            stop_at_build=self.stop_at_build,
            trial=p.TrialOptions(
                configs=change.inductor_configs,
                aten_fallback=as_lowered(change.aten_fallback),
                record_compile=record_compile,
                failing_code=self.failing_code,
            ),
        )

    def culprit(self, phase: str) -> Culprit:
        """The subsystem, most specific first: a graph pass whose disabling fixes the minimal graph, the one op
        whose lowering left to ATen does, the narrowest config that does, the ops any one of which left to ATen
        does (they fail as one fused kernel), all its ops left to ATen together."""
        fixing = [t.change for t, a in self.answers.items() if t.on == "minimal" and a.verdict == "fixes"]
        singles = [c.aten_fallback[0] for c in fixing if len(c.aten_fallback) == 1]
        by_pass = [c.configs[0][1].split(",")[-1] for c in fixing if c.family == "graph pass"]
        by_config = sorted((c for c in fixing if c.configs), key=lambda c: c.breadth)
        notes = []
        if self.lies:
            lie = self.lies[0]
            notes.append(f"{lie.describe()}: compiled code trusts the fake kernel; fix its register_fake")
            return Culprit(ops=self.ops, phase="export", subsystem=f"fake kernel of {lie.op}", detail="; ".join(notes))
        if by_pass:
            subsystem = f"graph pass {by_pass[0]}"
        elif len(singles) == 1:
            subsystem = f"lowering of {singles[0]}"
        elif by_config:
            subsystem = f"{by_config[0].family} ({by_config[0].describe()} avoids it)"
        elif singles:
            subsystem = "the kernel fusing " + ", ".join(singles)
        elif fixing:
            together = next((c for c in fixing if c in self.probes), None)
            subsystem = "lowering of " + ", ".join(together.aten_fallback if together else self.ops) + " (together)"
        else:
            subsystem = "unknown"
        if len(singles) > 1:
            notes.append(f"any one of {', '.join(singles)} left to ATen avoids it: they fail as one fused kernel")
        elif singles:
            notes.append(f"with {singles[0]} left to ATen (not lowered) the minimal graph compiles and runs")
        if by_config:
            notes.append("avoided by " + "; ".join(c.describe() for c in by_config[:3]))
        if not fixing:
            notes.append("no switch tried makes the minimal graph pass")
            notes += [  # a lowering left to ATen that fails otherwise cannot clear or blame that lowering
                f"with {', '.join(t.change.aten_fallback)} left to ATen it fails another way ({a.detail[:160]})"
                for t, a in self.answers.items()
                if t.on == "minimal" and t.change.aten_fallback and a.verdict == "other_failure" and a.detail
            ][:2]
        return Culprit(ops=self.ops, phase=phase, subsystem=subsystem, detail="; ".join(notes))

    def emit(self, event: TrialEvent) -> None:
        self.reporter.emit(event)
        where = "original" if event.on == "original" else "minimal graph"
        what = ", ".join(f"{k}={v!r}" for k, v in event.inductor_configs.items())
        if event.fallback:
            what = f"make_fallback({event.fallback}) before compiling"
        what = what or ("lowering left to ATen: " + ", ".join(event.aten_fallback) if event.aten_fallback else "as is")
        self.reporter.say(f"triage | {where}, {what}: {event.verdict} ({event.seconds:.1f} s)")


def _workaround(change: Change, answer: Answer) -> Workaround:
    return Workaround(
        inductor_configs=change.inductor_configs,
        family=change.family,
        compile_s=answer.seconds,
        max_abs_error=answer.max_abs_error,
        code=change.code,
    )
