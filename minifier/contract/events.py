"""The aoti-minify command-line contract: what it prints, writes and exits with.

The language server relies on nothing else of the minifier's: the JSON-lines events `--events`
prints on stdout, the same events appended to the dump's events log (`DumpLayout.events_log`, each
run's starting with a `begin` event that names its process), failure.json, the exit codes
(ExitCode), the error codes that name them in an `error` event (ErrorCode), and how long a warm fork
server waits. Both sides import this one module (it is torch-free), so they cannot drift apart.
Every event carries `"v": SCHEMA_VERSION`; a reader rejects other versions with a clear message
instead of misreading them. A new kind of event is no new version: readers skip kinds they do not
know (the server logs them).
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from . import wire
from .calls import AOTI, CompileCall
from .signature import KernelRef, Signature

SCHEMA_VERSION = 1

# How long a fork server with torch imported waits for the next run: `aoti-minify warm`'s default,
# and the language server's keepWarm setting's.
KEEP_WARM_SECONDS = 600.0


class ExitCode(enum.IntEnum):
    """aoti-minify's exit status (stable: the language server relies on it)."""

    OK = 0
    DID_NOT_FAIL = 1
    USAGE = 2
    BAD_INPUT = 3
    ENVIRONMENT = 4
    INTERNAL = 5
    BUSY = 6
    CANCELLED = 130


EXIT_MEANINGS = {
    ExitCode.OK: "reproduced (`run`) / minimized (`minify`) / demo finished / fork server warm (`warm`)",
    ExitCode.DID_NOT_FAIL: "the program does not fail (with the expected error) here",
    ExitCode.USAGE: "usage error",
    ExitCode.BAD_INPUT: "bad input: not a launcher it reads, missing or corrupt .pt2, unwritable output folder",
    ExitCode.ENVIRONMENT: "environment: no C++ compiler, no torch in this interpreter, workers cannot start, disk full",
    ExitCode.INTERNAL: "internal error (a bug in aoti-lens; the message says where the logs are)",
    ExitCode.BUSY: "another aoti-minify works on this dump (the message names its pid; a reproduction is waited for, "
    "any run with --wait); nothing was touched",
    ExitCode.CANCELLED: "cancelled (SIGINT/SIGTERM); the best checkpoint so far is kept as repro.py",
}

# An `error` event's code: the ExitCode that the command ends with, by name in lower case.
ErrorCode = Literal["did_not_fail", "usage", "bad_input", "environment", "internal", "busy"]


def error_code(code: ExitCode) -> ErrorCode:
    return code.name.lower()  # type: ignore[return-value]


def exit_code(code: ErrorCode) -> ExitCode:
    return ExitCode[code.upper()]


Verdict = Literal["fails", "passes", "other_failure", "crash", "timeout", "export_error"]


@dataclass(frozen=True)
class SourceLine:
    """A line of the user's own model code, taken from a graph node's stack trace."""

    file: str
    line: int
    node: str
    code: str = ""


@dataclass(frozen=True)
class FakeMismatch:
    """A node whose eager value is not what its fake (meta) kernel told export: compiled code sizes and
    reads it as the fake kernel said, eager code as it is (a custom op's `register_fake` that lies). `file` and
    `line`: where that fake kernel is defined, when it is Python."""

    node: str
    op: str
    fake: str  # dtype[sizes] by the fake kernel, symbols at the inputs' sizes
    real: str  # dtype[sizes] of the eager value
    file: str | None = None
    line: int | None = None

    def describe(self) -> str:
        return f"{self.node} ({self.op}): its fake kernel gives {self.fake}, the op returns {self.real}"


@dataclass(frozen=True)
class Failure:
    """What `aoti-minify run` learned about a failure; saved as failure.json beside the launcher."""

    launcher: str
    signature: Signature
    headline: str
    details: str
    kernel: KernelRef | None = None
    kernel_source: str | None = None
    model_lines: list[SourceLine] = field(default_factory=list)
    nodes: int = 0
    graph: str = ""
    torch_version: str = ""
    device: str = "cpu"
    seconds: float = 0.0
    fake_kernels: list[FakeMismatch] = field(default_factory=list)  # custom ops whose fake kernel lies
    v: int = SCHEMA_VERSION


Command = Literal["run", "minify", "capture", "report", "triage", "versions"]


@dataclass(frozen=True)
class BeginEvent:
    """The first event of every run in the events log: who writes the events that follow. `capture`
    writes one into each snapshot it takes, then reproduces the snapshots when the program ends."""

    command: Command
    pid: int
    host: str
    started: float  # time.time()
    launcher: str
    event: Literal["begin"] = "begin"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class StartEvent:
    nodes: int
    signature: Signature
    graph: str = ""
    workers: int = 1
    event: Literal["start"] = "start"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class CandidateEvent:
    nodes: int
    verdict: Verdict
    seconds: float
    cached: bool = False
    detail: str = ""
    queries: int = 0
    event: Literal["candidate"] = "candidate"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class CheckpointEvent:
    nodes: int
    path: str
    graph: str
    queries: int = 0
    seconds: float = 0.0
    event: Literal["checkpoint"] = "checkpoint"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class DoneEvent:
    nodes: int
    repro: str
    queries: int
    seconds: float
    start_nodes: int = 0
    signature: Signature | None = None
    # where nothing could be removed (repro.py is the whole graph): why, from what the candidates did instead
    unreduced: str = ""
    event: Literal["done"] = "done"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class StandaloneEvent:
    """After `done`: repro_standalone.py was checked (compiled and run as a fresh script). `fallback`: why it
    only runs repro.py (it could not be written as code, or did not fail the same way); empty when it reproduces."""

    path: str
    fallback: str = ""
    seconds: float = 0.0
    event: Literal["standalone"] = "standalone"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class FailureEvent:
    """`aoti-minify run` reproduced the failure; `path` is the failure.json written."""

    path: str
    failure: Failure
    event: Literal["failure"] = "failure"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class CancelledEvent:
    nodes: int
    checkpoint: str | None
    queries: int
    seconds: float
    event: Literal["cancelled"] = "cancelled"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class ErrorEvent:
    """The command could not do its job; `code` names the exit status that follows."""

    code: ErrorCode
    message: str
    event: Literal["error"] = "error"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class ReportEvent:
    """`aoti-minify report` wrote the bug report at `path`."""

    path: str
    event: Literal["report"] = "report"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class VersionsEvent:
    """`aoti-minify versions` wrote versions.json at `path`; `releases`: its Releases line."""

    path: str
    releases: str
    event: Literal["versions"] = "versions"
    v: int = SCHEMA_VERSION


# triage.json's own version, apart from the events' (a file kept beside repro.py, read by other tools too).
TRIAGE_VERSION = 1
VERSIONS_VERSION = 1  # versions.json's, likewise
Target = Literal["minimal", "original"]
# "fixes": a change made the graph compile and run (on the original: and match eager); "passes": an unchanged
# run of the original did not fail (a flaky failure)
TrialVerdict = Literal["fixes", "fails", "passes", "other_failure", "crash", "timeout", "export_error"]


@dataclass(frozen=True)
class Workaround:
    """Inductor configs, or code run before the compile, that make the original graph compile, load, run and
    match eager."""

    inductor_configs: dict[str, Any]
    family: str  # what it switches: "fusion", "C++ vectorization", "graph pass", "ATen fallback", ...
    compile_s: float  # the original's compile, load and run with it
    max_abs_error: float | None  # against eager, over the original's outputs
    verified_on: Target = "original"
    # Python to run once before the compile, where no config says it (one op's lowering left to ATen)
    code: str = ""

    def describe(self, call: CompileCall = AOTI) -> str:
        return change_of(self.inductor_configs, self.code, call)


def change_of(configs: dict[str, Any], code: str, call: CompileCall = AOTI) -> str:
    """What a workaround changes for the user: its code's registration, or its configs as `call` takes them."""
    return registration(code) if code else call.passing(configs)


def registration(code: str) -> str:
    """The line of a workaround's code that does it (its last, without the comment)."""
    return code.splitlines()[-1].split("  #")[0]


@dataclass(frozen=True)
class Rejected:
    """Configs that fixed the minimal graph but not the original (what the original did with them)."""

    inductor_configs: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Culprit:
    ops: list[str]  # the minimal graph's ops, `aten.index_put_.default`
    phase: str  # export, graph pass, lowering, scheduling, codegen, C++ compile, load, run, accuracy
    subsystem: str  # "lowering of aten.relu.default", "graph pass remove_noop_ops", "fusion", "unknown"
    detail: str


@dataclass(frozen=True)
class Triage:
    """What `aoti-minify triage` found; saved as triage.json beside repro.py."""

    signature: Signature
    workarounds: list[Workaround]  # verified on the original, narrowest first; empty: none among `tried`
    tried: int  # config changes tried on the minimal graph
    culprit: Culprit
    deterministic: bool  # the original failed in each of `runs` runs
    runs: int
    failures: int
    repro: str
    rejected: list[Rejected] = field(default_factory=list)
    seconds: float = 0.0
    torch_version: str = ""
    v: int = TRIAGE_VERSION


def load_triage(path: str) -> Triage:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("v") != TRIAGE_VERSION:
        raise wire.WireError(f"{path}: not a triage.json of schema v{TRIAGE_VERSION}")
    return wire.decode(Triage, data)


ReleaseVerdict = Literal["same_failure", "passes", "other_error", "cannot_run"]


@dataclass(frozen=True)
class ReleaseRun:
    """One torch release running the minimal repro, in an environment of its own."""

    release: str
    verdict: ReleaseVerdict
    detail: str  # the other error's signature, why it cannot run, what it installed
    seconds: float


@dataclass(frozen=True)
class Versions:
    """What `aoti-minify versions` found; saved as versions.json beside repro.py."""

    signature: Signature  # the failure each release is checked for
    script: str  # the repro the releases ran
    device: str
    runs: list[ReleaseRun]  # in the order they ran
    first_bad: str | None  # the oldest release that fails the same way (newer ones all failing)
    last_good: str | None  # the release just before it, which passes
    fixed_in: str | None  # the oldest release newer than the dump's own that passes
    torch_version: str = ""  # the dump's own
    # the original program under the newest release newer than the dump's own where the repro passes: where it
    # passes too, upgrading torch is a workaround verified on the user's own program
    original: ReleaseRun | None = None
    v: int = VERSIONS_VERSION

    def line(self) -> str:
        """The Releases line the bug tracker's template asks for: reproduces on, first bad, last good."""
        same = [r.release for r in self.runs if r.verdict == "same_failure"]
        passing = [r.release for r in self.runs if r.verdict == "passes"]
        parts = [f"reproduces on {', '.join(same) or 'none of those run'}"]
        if passing:
            parts.append(f"passes on {', '.join(passing)}")
        if self.first_bad:
            last_good = f", last good {self.last_good}" if self.last_good else ""
            parts.append(f"first bad {self.first_bad}{last_good}")
        if self.fixed_in:
            parts.append(f"fixed in {self.fixed_in}")
        if (upgrade := self.upgrade()) is not None:
            parts.append(upgrade)
        silent = [f"{r.release} ({r.verdict.replace('_', ' ')})" for r in self.runs if r.verdict in _SILENT]
        if silent:
            parts.append(f"not telling: {', '.join(silent)}")
        return "; ".join(parts)

    def upgrade(self) -> str | None:
        """Whether upgrading torch works around the failure, as the original program's run under a newer release
        showed; None where no newer release passes the repro."""
        run = self.original
        if run is None:
            return None
        if run.verdict == "passes":
            return f"the original program passes on {run.release} too: upgrading torch to {run.release} works around it"
        if run.verdict == "same_failure":
            return f"the original program still fails the same way on {run.release}: the repro does not show all of it"
        return f"upgrading could not be checked on the original program under {run.release}: {run.detail}"


_SILENT = ("other_error", "cannot_run")  # verdicts that say nothing of the bug


def load_versions(path: str) -> Versions:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("v") != VERSIONS_VERSION:
        raise wire.WireError(f"{path}: not a versions.json of schema v{VERSIONS_VERSION}")
    return wire.decode(Versions, data)


@dataclass(frozen=True)
class TrialEvent:
    """One config change tried by triage, on the minimal graph or (verifying it) on the original;
    empty `inductor_configs` and `aten_fallback` on the original: a determinism run."""

    inductor_configs: dict[str, Any]
    on: Target
    verdict: TrialVerdict
    seconds: float
    detail: str = ""
    aten_fallback: list[str] = field(default_factory=list)
    fallback: str = ""  # the op a workaround's code leaves to ATen (Workaround.code)
    event: Literal["trial"] = "trial"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class TriageEvent:
    """`aoti-minify triage` wrote triage.json at `path`."""

    path: str
    triage: Triage
    event: Literal["triage"] = "triage"
    v: int = SCHEMA_VERSION


LogLevel = Literal["info", "warning"]


@dataclass(frozen=True)
class MemoryEvent:
    """Queries that ran out of GPU or host memory beside others wait to run alone (`waiting`, 0 once none
    does); they are not verdicts. `detail`: what the last one raised."""

    waiting: int
    detail: str = ""
    event: Literal["memory"] = "memory"
    v: int = SCHEMA_VERSION


@dataclass(frozen=True)
class LogEvent:
    message: str
    level: LogLevel = "info"
    event: Literal["log"] = "log"
    v: int = SCHEMA_VERSION


Event = (
    BeginEvent
    | StartEvent
    | CandidateEvent
    | CheckpointEvent
    | DoneEvent
    | StandaloneEvent
    | FailureEvent
    | CancelledEvent
    | ErrorEvent
    | ReportEvent
    | VersionsEvent
    | TrialEvent
    | TriageEvent
    | MemoryEvent
    | LogEvent
)
# After these a run has nothing more to say (a `run` ends with its `failure` event), but see `ends`.
FINAL_EVENTS = (DoneEvent, CancelledEvent, ErrorEvent, FailureEvent, ReportEvent, VersionsEvent, TriageEvent)


def ends(event: Event, command: Command) -> bool:
    """Whether `event` is the last of a `command` run: a `triage` that minified first goes on after `done`."""
    return isinstance(event, FINAL_EVENTS) and not (command == "triage" and isinstance(event, DoneEvent))


_BY_NAME: dict[str, type] = {
    "begin": BeginEvent,
    "start": StartEvent,
    "candidate": CandidateEvent,
    "checkpoint": CheckpointEvent,
    "done": DoneEvent,
    "standalone": StandaloneEvent,
    "failure": FailureEvent,
    "cancelled": CancelledEvent,
    "error": ErrorEvent,
    "report": ReportEvent,
    "versions": VersionsEvent,
    "trial": TrialEvent,
    "triage": TriageEvent,
    "memory": MemoryEvent,
    "log": LogEvent,
}


def encode_event(event: Event) -> str:
    return wire.dumps(event)


def parse_event(line: str) -> Event:
    """Parse one line of `--events` output; raises wire.WireError on anything else."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise wire.WireError(f"not a JSON event: {line[:120]!r}") from e
    if not isinstance(data, dict) or data.get("event") not in _BY_NAME:
        raise wire.WireError(f"not an aoti-minify event: {line[:120]!r}")
    if data.get("v") != SCHEMA_VERSION:
        raise wire.WireError(
            f"event schema v{data.get('v')} is not the supported v{SCHEMA_VERSION}; "
            "the minifier and the server come from different aoti-lens versions"
        )
    return wire.decode(_BY_NAME[data["event"]], data)


def load_failure(path: str) -> Failure:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("v") != SCHEMA_VERSION:
        raise wire.WireError(f"{path}: not a failure.json of schema v{SCHEMA_VERSION}")
    return wire.decode(Failure, data)


# A run starts the events log afresh beyond this size, so that it never grows without end.
EVENTS_LOG_LIMIT = 16 << 20


@dataclass
class TailRead:
    events: list[Event]
    problems: list[str]
    restarted: bool  # the log was replaced or truncated: what was read before is gone


@dataclass
class EventsTail:
    """What was appended to an events log since the last read, whole lines only (a line still being
    written is read next time). A log that was replaced or truncated is read again from its start."""

    path: str
    offset: int = 0
    inode: int | None = None

    def read(self, limit: int = EVENTS_LOG_LIMIT * 2) -> TailRead:
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                restarted = self.inode is not None and (stat.st_ino != self.inode or stat.st_size < self.offset)
                if restarted or self.inode is None:
                    self.offset = 0
                self.inode = stat.st_ino
                f.seek(self.offset)
                data = f.read(limit)
        except OSError:
            restarted = self.inode is not None
            self.inode, self.offset = None, 0
            return TailRead([], [], restarted)
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == limit:  # one line longer than the limit: skip it
            self.offset += len(data)
            return TailRead([], [f"{self.path}: a line longer than {limit >> 20} MiB skipped"], restarted)
        self.offset += end
        events, problems = [], []
        for line in data[:end].decode("utf-8", "replace").splitlines():
            if not line.strip():
                continue
            try:
                events.append(parse_event(line))
            except wire.WireError as e:
                problems.append(str(e))
        return TailRead(events, problems, restarted)


def last_run(events: list[Event]) -> list[Event]:
    """The events of the last run in a log: from its last `begin` on (all of them if none)."""
    starts = [i for i, e in enumerate(events) if isinstance(e, BeginEvent)]
    return events[starts[-1] :] if starts else events
