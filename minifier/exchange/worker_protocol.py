"""Driver <-> worker messages: one JSON object per line over a private pipe pair.

The worker's stdout and stderr go to its log file (Inductor, g++ and CUDA print there freely);
only these messages travel on the pipes. Torch-free so the driver never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..contract import wire
from ..contract.events import FakeMismatch, SourceLine
from ..contract.launcher import LauncherSpec
from ..contract.signature import ErrorAnalysis

# A node of a torch.cond branch is named `<branch attr>.<node>` (minifier.program.branches) and reads its cond.
BRANCH_SEPARATOR = "."


@dataclass(frozen=True)
class NodeInfo:
    """One node of the flattened exported graph, as the torch-free driver sees it."""

    name: str
    kind: Literal["input", "param", "compute"]
    target: str
    op: str
    args: list[str]
    tensor: bool
    shape: str = ""
    device: str = "cpu"
    source: SourceLine | None = None
    bytes: int = 0  # its value's, where the sizes are static (0: not a tensor, or sizes known only at run time)


@dataclass(frozen=True)
class GraphInfo:
    nodes: list[NodeInfo]
    outputs: list[str]
    code: str
    torch_version: str
    device: str

    def compute_nodes(self) -> list[str]:
        return [n.name for n in self.nodes if n.kind == "compute"]

    def compute_args(self) -> dict[str, list[str]]:
        """Each compute node's operands: the dataflow the search closes candidates over."""
        return {n.name: n.args for n in self.nodes if n.kind == "compute"}

    def by_name(self) -> dict[str, NodeInfo]:
        return {n.name: n for n in self.nodes}


@dataclass(frozen=True)
class InitRequest:
    launcher: LauncherSpec
    work_dir: str
    export_mode: Literal["python", "dynamo"] = "python"
    accuracy: str = ""
    imports: list[str] = field(default_factory=list)
    type: Literal["init"] = "init"


@dataclass(frozen=True)
class DescribeRequest:
    type: Literal["describe"] = "describe"


@dataclass(frozen=True)
class ValuesRequest:
    """Run the original graph eagerly once and store every intermediate tensor in `path`."""

    path: str
    type: Literal["values"] = "values"


@dataclass(frozen=True)
class FakeCheckRequest:
    """Run the original graph eagerly once, when it calls custom ops, and check each custom op's value against
    its fake kernel (nothing stored: `aoti-minify run` asks it beside the failure)."""

    type: Literal["fake_check"] = "fake_check"


@dataclass(frozen=True)
class FakeChecked:
    mismatches: list[FakeMismatch] = field(default_factory=list)
    error: str | None = None  # the check itself failed (nothing is known)
    type: Literal["fake_checked"] = "fake_checked"


@dataclass(frozen=True)
class WarmRequest:
    """Pay, while idle, what a worker's first candidate would: Inductor's imports and a first export."""

    type: Literal["warm"] = "warm"


@dataclass(frozen=True)
class HoldRequest:
    """Become the holder of the program's weights on this worker's GPU: place them there once and write, at
    `path`, the CUDA IPC handles through which the other workers on that GPU use them (ShareRequest)."""

    path: str
    type: Literal["hold"] = "hold"


@dataclass(frozen=True)
class ShareRequest:
    """Use the weights a holder placed on this worker's GPU (its handles at `path`) instead of copies."""

    path: str
    type: Literal["share"] = "share"


@dataclass(frozen=True)
class OriginalProgram:
    """The launcher's exported program, as the worker loaded it."""

    source: Literal["original"] = "original"


@dataclass(frozen=True)
class KeptNodes:
    """The graph made of these nodes of the original, fed the values the eager run saved at `values_path`."""

    nodes: list[str]
    values_path: str
    source: Literal["kept"] = "kept"


@dataclass(frozen=True)
class SavedProgram:
    """An exported program saved at `path` (triage's repro.pt2), whose weights refer to the launcher's."""

    path: str
    source: Literal["saved"] = "saved"


@dataclass(frozen=True)
class StandaloneScript:
    """The program that a repro_standalone.py file at `path` builds."""

    path: str
    source: Literal["script"] = "script"


Program = OriginalProgram | KeptNodes | SavedProgram | StandaloneScript


@dataclass(frozen=True)
class TrialOptions:
    """What triage (minifier.driver.triage) asks more of one compile.

    `configs`: Inductor configs over the launcher's (a workaround tried, as
    `aoti_compile_and_package(..., inductor_configs=configs)` would pass them).
    `compare`: check the compiled outputs against eager at the launcher's tolerance (the accuracy check) and report
    the largest difference.
    `aten_fallback`: ops (`aten.relu.default`) whose Inductor lowering is left to the ATen kernel (the culprit's
    subsystem).
    `record_compile`: name the graph passes the compile applied, the ops it lowered and the fingerprint of the code
    it generated.
    `failing_code`: such a fingerprint of a failing compile: a compile generating that code stops before the C++
    compile (Outcome status "unchanged").
    `setup`: a workaround's Python, run before the compile as its user runs it (what it changes of Inductor's
    lowering tables is undone after)."""

    configs: dict[str, Any] = field(default_factory=dict)
    compare: bool = False
    aten_fallback: list[str] = field(default_factory=list)
    record_compile: bool = False
    failing_code: str | None = None
    setup: str = ""


@dataclass(frozen=True)
class QueryRequest:
    """Compile, load and run one candidate, the `program` one of the four kinds above.

    `provenance`: record which graph nodes each generated kernel came from, and trace the kernel launches
    of the run, both into the worker's log (minifier.exchange.worklog).
    `own_cache`: compile in an Inductor cache of its own, removed after. The same graph compiling in
    another worker generates the same wrapper code, and Inductor holds a lock named for that code's hash
    around the package's C++ compile: in the shared cache the two compiles would run one after the other.
    `stop_at_build`: the failure being minified raises before its generated code is built, so a candidate that
    reaches the build does not fail that way: it is stopped there and passes (Outcome.built).
    `early_kernel`: should the package's kernels not compile, say so at once (KernelFailed, before the Outcome):
    the wrapper's compile, which Inductor raises first, is still running then.
    `trial`: what triage changes of the compile."""

    key: str
    program: Program
    save_pt2: str | None = None
    provenance: bool = False
    own_cache: bool = False
    stop_at_build: bool = False
    early_kernel: bool = False
    trial: TrialOptions = field(default_factory=TrialOptions)
    type: Literal["query"] = "query"


@dataclass(frozen=True)
class ProbeRequest:
    """Localize an accuracy failure by values: compile the graph once with every tensor node an output and compare
    each with the eager fp64 reference (Divergence), from the values the eager run saved at `values_path`.
    The pool schedules it as a query."""

    key: str
    values_path: str
    type: Literal["probe"] = "probe"


Query = QueryRequest | ProbeRequest


@dataclass(frozen=True)
class ConfigsRequest:
    """Inductor's configs as this worker compiles with them (the torch in use, the launcher's settings)."""

    type: Literal["configs"] = "configs"


@dataclass(frozen=True)
class StandaloneRequest:
    """Write the graph made of `kept` as plain PyTorch code (standalone.py), every value exact or not."""

    kept: list[str]
    values_path: str
    exact: bool = False
    type: Literal["standalone"] = "standalone"


def code_beside(pt2: str) -> str:
    """Where a worker writes a saved candidate's readable code, beside its program: a worker that dies
    running it sends no Outcome, and that failure may be the one being minified."""
    return pt2 + ".code.py"


Request = (
    InitRequest
    | DescribeRequest
    | ValuesRequest
    | FakeCheckRequest
    | WarmRequest
    | HoldRequest
    | ShareRequest
    | QueryRequest
    | ProbeRequest
    | StandaloneRequest
    | ConfigsRequest
)


@dataclass(frozen=True)
class Ready:
    pid: int
    torch_version: str
    warnings: list[str] = field(default_factory=list)
    type: Literal["ready"] = "ready"


@dataclass(frozen=True)
class Described:
    graph: GraphInfo
    type: Literal["described"] = "described"


@dataclass(frozen=True)
class ValuesStored:
    path: str
    stored: list[str]
    error: str | None = None
    poisoned: bool = False
    mismatches: list[FakeMismatch] = field(default_factory=list)
    type: Literal["values_stored"] = "values_stored"


@dataclass(frozen=True)
class Warmed:
    type: Literal["warmed"] = "warmed"


@dataclass(frozen=True)
class Held:
    """The holder's answer: its handles are at `path`, for `bytes` of weights (0: nothing to share)."""

    path: str
    bytes: int
    type: Literal["held"] = "held"


@dataclass(frozen=True)
class Shared:
    """The worker uses the holder's weights (`adopted` of them), or could not (`error`; `poisoned`: its CUDA
    context with it, so it must not serve again)."""

    adopted: int
    error: str = ""
    poisoned: bool = False
    type: Literal["shared"] = "shared"


@dataclass(frozen=True)
class Divergence:
    """A probe's findings (ProbeRequest): its nodes off the reference, in graph order, and the floating-point values
    it could not compare (views, what an in-place op overwrites)."""

    diverged: list[str] = field(default_factory=list)
    uncompared: list[str] = field(default_factory=list)
    kind: Literal["divergence"] = "divergence"


@dataclass(frozen=True)
class TrialFindings:
    """What a query's TrialOptions asked to know. With `compare`: the largest difference from eager over all
    outputs. With `record_compile`: the passes applied, in order, the ops lowered (after decompositions) and the
    generated code's fingerprint."""

    max_abs_error: float | None = None
    passes: list[str] = field(default_factory=list)
    lowered: list[str] = field(default_factory=list)
    generated: str | None = None
    kind: Literal["trial"] = "trial"


Findings = Divergence | TrialFindings


@dataclass(frozen=True)
class Outcome:
    """What happened to one candidate inside the worker (crashes and timeouts are seen by the driver).
    "out_of_memory": an allocation found no GPU or host memory; no verdict (the pool runs it again).
    `findings`: what the operation found besides its verdict, where it was asked (a probe, a triage trial)."""

    key: str
    status: Literal["passed", "raised", "export_error", "unchanged", "out_of_memory"]
    seconds: float
    error: ErrorAnalysis | None = None
    text: str = ""
    code: str = ""
    pt2: str | None = None
    poisoned: bool = False
    built: bool | None = None  # the compile reached the build of its code (None: no compile ran)
    findings: Findings | None = None
    type: Literal["outcome"] = "outcome"

    def trial(self) -> TrialFindings:
        return self.findings if isinstance(self.findings, TrialFindings) else TrialFindings()

    def divergence(self) -> Divergence:
        return self.findings if isinstance(self.findings, Divergence) else Divergence()


@dataclass(frozen=True)
class KernelFailed:
    """Sent during a query with `early_kernel`: the package's kernels did not compile (the Outcome follows,
    with this error unless the wrapper's compile fails too: Inductor raises the wrapper's first)."""

    key: str
    error: ErrorAnalysis
    type: Literal["kernel_failed"] = "kernel_failed"


@dataclass(frozen=True)
class StandaloneCode:
    """The code, or (code None) why the graph cannot be written as code."""

    code: str | None
    reason: str = ""
    type: Literal["standalone_code"] = "standalone_code"


@dataclass(frozen=True)
class Configs:
    """Each config's value (JSON scalars and lists; configs holding objects are left out), and `settings`: the
    default of each the launcher set away from it (a debug switch of the user's), what a workaround reverts it to."""

    values: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    type: Literal["configs"] = "configs"


@dataclass(frozen=True)
class WorkerFailed:
    """The worker cannot serve at all (bad program file, no compiler...); it exits after this."""

    code: Literal["bad_input", "environment", "internal"]
    message: str
    type: Literal["failed"] = "failed"


Reply = (
    Ready
    | Described
    | ValuesStored
    | FakeChecked
    | Warmed
    | Held
    | Shared
    | KernelFailed
    | Outcome
    | StandaloneCode
    | Configs
    | WorkerFailed
)
# The replies that answer one request; the pool handles the others (Ready, Warmed, WorkerFailed) itself.
Answer = Described | ValuesStored | FakeChecked | KernelFailed | Outcome | StandaloneCode | Configs
# What a pool's `call` (one request, one reply) gets for each request it may send.
CALL_ANSWERS: dict[type, type] = {
    DescribeRequest: Described,
    ValuesRequest: ValuesStored,
    FakeCheckRequest: FakeChecked,
    StandaloneRequest: StandaloneCode,
    QueryRequest: Outcome,
    ConfigsRequest: Configs,
}

_REQUESTS = {
    "init": InitRequest,
    "describe": DescribeRequest,
    "values": ValuesRequest,
    "fake_check": FakeCheckRequest,
    "warm": WarmRequest,
    "hold": HoldRequest,
    "share": ShareRequest,
    "query": QueryRequest,
    "probe": ProbeRequest,
    "standalone": StandaloneRequest,
    "configs": ConfigsRequest,
}
_REPLIES = {
    "ready": Ready,
    "described": Described,
    "values_stored": ValuesStored,
    "fake_checked": FakeChecked,
    "warmed": Warmed,
    "held": Held,
    "shared": Shared,
    "kernel_failed": KernelFailed,
    "outcome": Outcome,
    "standalone_code": StandaloneCode,
    "configs": Configs,
    "failed": WorkerFailed,
}


def encode(message: Request | Reply) -> bytes:
    return (wire.dumps(message) + "\n").encode()


def decode_request(line: bytes) -> Request:
    return wire.decode_tagged(line, _REQUESTS, "worker message")


def decode_reply(line: bytes) -> Reply:
    return wire.decode_tagged(line, _REPLIES, "worker message")
