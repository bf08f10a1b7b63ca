"""One AOTI failure as the editor sees it: what is on disk, and what its running job reported.

State moves found -> reproducing -> reproduced -> minifying -> minimized (or cancelled / error).
Events from `aoti-minify --events` drive it while a job runs; files on disk (failure.json,
repro.py, written by a job or by someone running aoti-minify in a terminal) drive it otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pygls.uris import from_fs_path

from minifier.contract.artifacts import complete_checkpoint, read_repro_graph, repro_stopped
from minifier.contract.calls import AOTI, CALLS, CompileCall
from minifier.contract.events import (
    BeginEvent,
    CancelledEvent,
    CandidateEvent,
    CheckpointEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    Failure,
    FailureEvent,
    LogEvent,
    MemoryEvent,
    ReportEvent,
    StartEvent,
    Triage,
    TriageEvent,
    TrialEvent,
    VersionsEvent,
    load_failure,
    load_triage,
    load_versions,
)
from minifier.contract.launcher import BadLauncher, LauncherSpec, read_launcher
from minifier.contract.layout import DumpLayout, checkpoint_nodes
from minifier.contract.signature import KernelRef, Signature

from .protocol import FailureItem, State, graph_uri, kernel_uri, shrink_uri


@dataclass(frozen=True)
class OnDisk:
    """A failure's files, read off the event loop (read_launcher parses Python)."""

    launcher: str
    spec: LauncherSpec | None
    problem: str | None
    failure: Failure | None
    failure_problem: str | None
    repro: str | None
    repro_graph: str | None
    repro_stopped: bool  # repro.py is the best checkpoint of a minification that was stopped
    checkpoint: str | None  # the smallest whole checkpoint
    checkpoint_graph: str | None
    report: str | None
    triage: Triage | None = None  # triage.json, when a triage of this repro wrote one
    releases: str | None = None  # versions.json's Releases line, when a check of this repro wrote one

    @property
    def checkpoint_nodes(self) -> int | None:
        return checkpoint_nodes(os.path.basename(self.checkpoint)) if self.checkpoint else None

    @property
    def interrupted(self) -> bool:
        """A minification left checkpoints but no repro.py of its end: it was stopped, or killed."""
        return self.checkpoint is not None and (self.repro is None or self.repro_stopped)


def read_disk(launcher: str) -> OnDisk | None:
    """None when the launcher is gone (its run folder was deleted)."""
    if not os.path.isfile(launcher):
        return None
    spec, problem = None, None
    try:
        spec = read_launcher(launcher)
    except BadLauncher as e:
        problem = str(e).removeprefix(f"{launcher}: ")
    layout = DumpLayout.of(launcher)
    failure, failure_problem = None, None
    if os.path.isfile(layout.failure_json):
        try:
            failure = load_failure(layout.failure_json)
        except (OSError, ValueError) as e:
            failure_problem = f"{layout.failure_json} is unreadable ({e}); reproduce the failure to rewrite it"
    repro = layout.repro_py
    has_repro = os.path.isfile(repro)
    checkpoint = _smallest_checkpoint(layout.checkpoints)
    return OnDisk(
        launcher=launcher,
        spec=spec,
        problem=problem,
        failure=failure,
        failure_problem=failure_problem,
        repro=repro if has_repro else None,
        repro_graph=read_repro_graph(repro) if has_repro else None,
        repro_stopped=has_repro and repro_stopped(repro),
        checkpoint=checkpoint,
        checkpoint_graph=read_repro_graph(checkpoint) if checkpoint else None,
        report=layout.report_md if os.path.isfile(layout.report_md) else None,
        triage=_triage(layout) if has_repro else None,
        releases=_releases(layout) if has_repro else None,
    )


def _releases(layout: DumpLayout) -> str | None:
    try:
        return load_versions(layout.versions_json).line()
    except (OSError, ValueError):
        return None


def _triage(layout: DumpLayout) -> Triage | None:
    try:
        return load_triage(layout.triage_json)
    except (OSError, ValueError):
        return None


def _smallest_checkpoint(folder: str) -> str | None:
    """Of aoti-lens' checkpoints there, the smallest with its program whole (a run killed mid-write may
    leave one cut short; PyTorch's own checkpoints share one program and are not ours to show)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    sizes = sorted((n, name) for name in names if (n := checkpoint_nodes(name)) is not None)
    return next((path for _, name in sizes if complete_checkpoint(path := os.path.join(folder, name))), None)


@dataclass(frozen=True)
class ModelLine:
    """One line of the user's model code and the graph nodes it produced."""

    file: str
    line: int
    nodes: list[str]
    code: str


@dataclass(frozen=True)
class ShrinkPoint:
    """The smallest failing graph known `seconds` into a minification: one per checkpoint."""

    seconds: float
    nodes: int


@dataclass
class FailureRecord:
    id: str
    launcher: str
    spec: LauncherSpec | None = None
    problem: str | None = None
    failure: Failure | None = None
    state: State = "found"
    message: str | None = None
    signature: Signature | None = None
    nodes_start: int | None = None
    nodes_now: int | None = None
    history: list[ShrinkPoint] = field(default_factory=list)
    queries: int | None = None
    seconds: float | None = None
    graph: str | None = None
    original: str | None = None
    repro: str | None = None
    report: str | None = None
    external: BeginEvent | None = None  # an aoti-minify this server did not start, working on it now
    triage: Triage | None = None
    trials: int = 0  # config changes a running triage has tried
    releases: str | None = None  # which torch releases have it (`aoti-minify versions`)
    waiting_for_memory: int = 0  # candidates of the running job that wait to run alone

    @property
    def layout(self) -> DumpLayout:
        return DumpLayout.of(self.launcher)

    @property
    def call(self) -> CompileCall:
        """The user's compile call that failed: where a workaround goes."""
        return CALLS[self.spec.kind] if self.spec else AOTI

    @property
    def noun(self) -> str:
        """What failed, as the editor names it: "AOTI failure" or "torch.compile failure"."""
        return "torch.compile failure" if self.spec and self.spec.kind == "after_aot" else "AOTI failure"

    @property
    def usable(self) -> bool:
        return self.problem is None

    @property
    def kernel(self) -> KernelRef | None:
        return self.failure.kernel if self.failure else None

    @property
    def kernel_name(self) -> str | None:
        """Name of the virtual kernel document, when there is source to show."""
        kernel = self.kernel
        if kernel is None or not self.failure or not self.failure.kernel_source:
            return None
        return kernel.name or os.path.splitext(os.path.basename(kernel.file or "kernel"))[0]

    def model_lines(self) -> list[ModelLine]:
        grouped: dict[tuple[str, int], ModelLine] = {}
        for source in self.failure.model_lines if self.failure else []:
            key = (source.file, source.line)
            grouped.setdefault(key, ModelLine(source.file, source.line, [], source.code)).nodes.append(source.node)
        return list(grouped.values())

    @property
    def nodes_at_start(self) -> int | None:
        """From the running job, else from the last `run`'s failure.json."""
        return self.nodes_start or (self.failure.nodes if self.failure else None)

    def nodes_line(self) -> str:
        start = self.nodes_at_start
        return f"{start} -> {self.nodes_now} nodes" if start and self.nodes_now else f"{start or '?'} nodes"

    def progress_line(self) -> str:
        waiting = f", {self.waiting_for_memory} waiting for GPU/host memory" if self.waiting_for_memory else ""
        return f"{self.nodes_line()}, {self.queries or 0} queries, {self.seconds or 0:.0f} s{waiting}"

    def graph_header(self) -> str:
        # without a live history (after a restart), the start and the smallest checkpoint on disk
        steps = [p.nodes for p in self.history] or [n for n in (self.nodes_at_start, self.nodes_now) if n]
        counts = " -> ".join(map(str, dict.fromkeys(steps))) or "?"
        line = f"# {counts} nodes, {self.queries or 0} queries, {self.seconds or 0:.0f} s"
        target = self.signature.describe() if self.signature else "not reproduced yet"
        note = "# repro.py's graph could not be read; below is the original\n" if self.repro and not self.graph else ""
        return f"{line}\n# {self.state}: {target}\n{note}"

    def current_graph(self) -> str:
        return self.graph or self.original_graph()

    def original_graph(self) -> str:
        return (self.failure.graph if self.failure else "") or self.original or ""

    def sync(self, disk: OnDisk) -> None:
        """Take what is on disk. The state follows only when a result file appeared or changed (or
        the record is new, or its launcher became usable), so a job's error or cancel stays
        visible until something new is written."""
        recovered = self.problem is not None
        self.spec, self.problem = disk.spec, disk.problem
        if self.problem is not None:
            self.state, self.message = "error", self.problem
            return
        new_result = (disk.failure, disk.repro) != (self.failure, self.repro) or recovered or self.message is None
        self.failure, self.repro, self.report = disk.failure, disk.repro, disk.report
        self.triage = disk.triage
        self.releases = disk.releases
        if self.failure is not None:
            self.signature = self.failure.signature
        if (disk.repro or disk.interrupted) and disk.checkpoint_nodes is not None and not self.history:
            self.nodes_start = self.failure.nodes if self.failure else None
            self.nodes_now = disk.checkpoint_nodes
            self.graph = disk.checkpoint_graph if disk.interrupted else disk.repro_graph
        if new_result:
            self.state = (
                "cancelled"
                if disk.interrupted
                else "minimized"
                if disk.repro
                else "reproduced"
                if disk.failure
                else "found"
            )
            self.message = disk.failure_problem or self._settled_message(disk)

    def _settled_message(self, disk: OnDisk) -> str:
        if self.state == "cancelled":
            where = "repro.py holds" if disk.repro else f"checkpoints/{os.path.basename(disk.checkpoint or '')} is"
            return f"stopped earlier at {self.nodes_line()}: {where} the smallest failing graph so far; minify again"
        if self.state == "minimized" and self.nodes_start == self.nodes_now:
            return "nothing removed earlier: no smaller graph failed the same way; repro.py is the whole graph"
        if self.state == "minimized":
            return f"minimized earlier: {self.nodes_line()}; see repro.py"
        if self.state == "reproduced" and self.failure:
            return f"reproduced in {self.failure.seconds:.0f} s"
        return "not reproduced yet"

    def begin(self, state: State, message: str, keep_graph: bool = False) -> None:
        self.state, self.message, self.trials, self.waiting_for_memory = state, message, 0, 0
        if state == "minifying" and not keep_graph:
            self.history, self.graph, self.queries, self.seconds = [], None, 0, 0.0
            self.nodes_start = self.nodes_now = self.failure.nodes if self.failure else None

    def apply(self, event: Event) -> None:
        """Fold one event in (the documents see what changed for themselves: server/documents.py)."""
        if isinstance(event, (BeginEvent, LogEvent)):
            return
        if isinstance(event, ReportEvent):
            self.report = event.path
        elif isinstance(event, VersionsEvent):
            self.releases = event.releases
        elif isinstance(event, FailureEvent):
            self.failure, self.signature = event.failure, event.failure.signature
            self.state, self.message = "reproduced", f"reproduced in {event.failure.seconds:.0f} s"
        elif isinstance(event, StartEvent):
            self.nodes_start = event.nodes
            self.nodes_now = min(self.nodes_now or event.nodes, event.nodes)
            self.history = self.history or [ShrinkPoint(0.0, event.nodes)]
            self.original = event.graph or self.original
            if event.signature.exc_type != "Any":
                self.signature = event.signature
            self.message = self.progress_line()
        elif isinstance(event, CandidateEvent):
            self.queries = max(self.queries or 0, event.queries)
            self.message = self.progress_line()
        elif isinstance(event, MemoryEvent):
            self.waiting_for_memory = event.waiting
            self.message = self.progress_line()
        elif isinstance(event, CheckpointEvent):
            self.nodes_now, self.graph = event.nodes, event.graph
            self.history = [
                *(self.history or [ShrinkPoint(0.0, self.nodes_start or event.nodes)]),
                ShrinkPoint(event.seconds, event.nodes),
            ]
            self.queries = max(self.queries or 0, event.queries)
            self.seconds = max(self.seconds or 0.0, event.seconds)
            self.message = self.progress_line()
        elif isinstance(event, DoneEvent):
            self.nodes_start = event.start_nodes or self.nodes_start
            self.nodes_now, self.queries, self.seconds = event.nodes, event.queries, event.seconds
            self.repro = event.repro
            self.signature = event.signature or self.signature
            if self.history:
                self.history.append(ShrinkPoint(event.seconds, event.nodes))
            self.state = "minimized"
            did = f"nothing removed, {event.unreduced}" if event.unreduced else "minimized"
            self.message = f"{did}: {self.progress_line()}"
        elif isinstance(event, CancelledEvent):
            self.queries, self.seconds = event.queries, event.seconds
            if event.checkpoint:
                self.repro = self.layout.repro_py
            self.state = "cancelled"
            self.message = f"cancelled at {self.progress_line()}" + (
                "; repro.py holds the best so far" if event.checkpoint else ""
            )
        elif isinstance(event, TrialEvent):
            self.trials += 1
            self.message = f"finding a workaround: {self.trials} compiles"
        elif isinstance(event, TriageEvent):
            self.triage, self.state = event.triage, "minimized"
            self.message = triage_line(event.triage, self.call)
        elif isinstance(event, ErrorEvent):
            self.message = event.message

    def item(self) -> FailureItem:
        kernel = self.kernel_name
        return FailureItem(
            id=self.id,
            label=self.signature.describe() if self.signature else self.noun,
            compiler=self.call.name if self.spec else None,
            run_dir=self.layout.run_dir,
            launcher=uri_of(self.launcher),
            state=self.state,
            signature=self.signature.describe() if self.signature else None,
            kind=self.signature.kind if self.signature else None,
            nodes_start=self.nodes_at_start,
            nodes_now=self.nodes_now,
            queries=self.queries,
            seconds=self.seconds,
            message=self.message,
            repro=uri_of(self.repro) if self.repro else None,
            graph_uri=graph_uri(self.id),
            kernel_uri=kernel_uri(self.id, kernel) if kernel else None,
            shrink_uri=shrink_uri(self.id),
            report=uri_of(self.report) if self.report else None,
            external_pid=self.external.pid if self.external else None,
        )


def triage_line(triage: Triage, call: CompileCall) -> str:
    if not triage.workarounds:
        return f"no workaround among {triage.tried} config changes tried; culprit: {triage.culprit.subsystem}"
    change = triage.workarounds[0].describe(call)
    return f"workaround verified on the original: {change}; culprit: {triage.culprit.subsystem}"


def uri_of(path: str) -> str:
    return from_fs_path(path) or path


class FailureStore:
    """All known failures, by id (the run folder's name, made unique) and by launcher path."""

    def __init__(self) -> None:
        self._by_id: dict[str, FailureRecord] = {}

    def records(self) -> list[FailureRecord]:
        return sorted(self._by_id.values(), key=lambda r: r.id)

    def get(self, failure_id: str) -> FailureRecord | None:
        return self._by_id.get(failure_id)

    def by_launcher(self, launcher: str) -> FailureRecord | None:
        return next((r for r in self._by_id.values() if r.launcher == launcher), None)

    def add(self, launcher: str) -> FailureRecord:
        base = DumpLayout.of(launcher).run_name
        failure_id, n = base, 1
        while failure_id in self._by_id:
            n += 1
            failure_id = f"{base}~{n}"
        record = self._by_id[failure_id] = FailureRecord(id=failure_id, launcher=launcher)
        return record

    def remove(self, failure_id: str) -> None:
        self._by_id.pop(failure_id, None)
