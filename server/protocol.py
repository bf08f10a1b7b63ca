"""The language server <-> client contract: custom LSP methods, commands, settings, aoti: URIs.

The one source of this schema. `python -m server.codegen` writes the client's copy
(vscode-client/src/protocol.ts) and the LSP tables of docs/protocol.md from this module, the
trailing `# comments` here becoming their descriptions; tests/server/test_protocol_schema.py
fails when either is stale or when package.json's settings and commands disagree with it.

JSON on the wire is camelCase; the rest of the server only sees the typed, snake_case dataclasses
here, converted at this one boundary.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from minifier.contract.events import KEEP_WARM_SECONDS

from . import __version__

PROTOCOL_VERSION = 2  # bumped on any change that a client of the previous version would misread
CAPABILITY = "aotiLens"  # the key of `ClientCapability` / `ServerCapability` in the capabilities' `experimental`
SETTINGS_SECTION = "aoti"  # VS Code's settings are `aoti.<key>`; didChangeConfiguration may nest Settings under it
SCHEME = "aoti"  # the scheme of the virtual documents (LSP 3.18 workspace/textDocumentContent)

FAILURES = "aoti/failures"  # request (client -> server), params `{}`, result `FailureList`
FAILURES_CHANGED = "aoti/failuresChanged"  # notification (server -> client), params `FailureList`, on any change; only to clients that announce `ClientCapability`
CAPTURE_COMMAND = "aoti/captureCommand"  # request (client -> server), params `CaptureParams`, result `CaptureCommand`: the command line a client runs in a terminal
METHODS = (FAILURES, FAILURES_CHANGED, CAPTURE_COMMAND)

MINIFY = "aoti.minify"  # minify the failure; on a failure already being minified, show its shrinking graph
REPRODUCE = "aoti.reproduce"  # run the failure once to learn its signature and failing kernel (writes failure.json)
CANCEL = "aoti.cancel"  # stop the failure's job (a minification still writes repro.py from its best checkpoint)
OPEN_REPRO = "aoti.openRepro"  # open the failure's repro.py (window/showDocument)
SHOW_GRAPH = "aoti.showGraph"  # open the shrinking graph document (window/showDocument)
SHOW_KERNEL = "aoti.showKernel"  # open the failing kernel's document (window/showDocument)
SHOW_SHRINK = "aoti.showShrink"  # open the shrink picture: nodes over time, checkpoints as points, and the final graph
REPORT = "aoti.report"  # write report.md beside repro.py (a PyTorch bug report: `aoti-minify report`) and open it
TRIAGE = "aoti.triage"  # find a workaround verified on the original and name the culprit (`aoti-minify triage`)
VERSIONS = "aoti.versions"  # run the minimal repro under other torch releases (`aoti-minify versions`): which have it
SERVER_COMMANDS = (
    MINIFY,
    REPRODUCE,
    CANCEL,
    OPEN_REPRO,
    SHOW_GRAPH,
    SHOW_KERNEL,
    SHOW_SHRINK,
    REPORT,
    TRIAGE,
    VERSIONS,
)
CAPTURE = "aoti.capture"  # run the script (or settings.captureCommand) under `aoti-minify capture` in the background; the VS Code client runs it in a terminal instead
FILE_COMMANDS = (CAPTURE,)  # commands whose arguments are `[fileUri]`

State = Literal["found", "reproducing", "reproduced", "minifying", "minimized", "cancelled", "error"]
RUNNING_STATES: tuple[State, ...] = ("reproducing", "minifying")  # a job (an `aoti-minify` child process) runs

# Said by the server when it refuses to minify or reproduce, and by the client before it even asks.
UNTRUSTED = (
    "aoti-lens runs nothing in an untrusted workspace: reproducing or minifying executes this workspace's "
    "minifier_launcher.py. Trust the workspace (Workspaces: Manage Workspace Trust) to reproduce and "
    "minify its failures."
)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def to_json(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {camel(f.name): to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(value) for value in obj]
    return obj


@dataclass(frozen=True)
class ClientCapability:
    """What an aoti-lens client announces in InitializeParams.capabilities.experimental."""

    protocol_version: int  # the client's PROTOCOL_VERSION


@dataclass(frozen=True)
class ServerCapability:
    protocol_version: int = PROTOCOL_VERSION  # the server's PROTOCOL_VERSION
    package_version: str = __version__  # the aoti-lens package the server runs from
    client_protocol_version: int | None = None  # what the client announced (null: nothing, not an aoti-lens client)


def experimental_capabilities(client_protocol: int | None) -> dict[str, Any]:
    """The server's part of InitializeResult.capabilities.experimental."""
    return {CAPABILITY: to_json(ServerCapability(client_protocol_version=client_protocol))}


def client_protocol(experimental: Any) -> int | None:
    """The protocol version an aoti-lens client announced, None for any other client."""
    experimental = plain_json(experimental)
    mine = experimental.get(CAPABILITY) if isinstance(experimental, dict) else None
    version = mine.get(camel("protocol_version")) if isinstance(mine, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def plain_json(obj: Any) -> Any:
    """pygls hands untyped JSON (LSPAny) over as namedtuples; the rest of the server wants dicts."""
    if hasattr(obj, "_asdict"):
        return {k: plain_json(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: plain_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain_json(v) for v in obj]
    return obj


@dataclass(frozen=True)
class FailureItem:
    id: str  # the run folder's name, e.g. "run_2026_11_29_16_34_13_593805-pid_1859" (unique per server)
    label: str  # short text for the tree: the signature's headline, or "AOTI failure" / "torch.compile failure"
    run_dir: str  # absolute path of torch_compile_debug/run_*
    launcher: str  # file URI of minifier_launcher.py
    state: State
    signature: str | None  # e.g. "CppCompileError: 'compile' was not declared in this scope"
    kind: str | None  # compile_error, runtime_error, accuracy, crash or timeout
    nodes_start: int | None  # nodes of the graph the minification started from
    nodes_now: int | None  # nodes of the smallest failing graph so far
    queries: int | None  # candidates compiled and run
    seconds: float | None  # the minification's time so far
    message: str | None  # human status or error text ("73 -> 12 nodes, 9 queries, 41 s")
    repro: str | None  # file URI of repro.py, once minimized
    graph_uri: str  # the shrinking graph document
    kernel_uri: str | None  # the failing kernel's document, when the failure names a kernel
    shrink_uri: str  # the shrink picture (Markdown: nodes over time, the final graph)
    report: str | None  # file URI of report.md, once written
    external_pid: int | None  # pid of an aoti-minify started outside this server (a terminal) that works on it now
    compiler: str | None  # who compiled the failing graph: "aoti_compile_and_package" or "torch.compile"


@dataclass(frozen=True)
class FailureList:
    failures: tuple[FailureItem, ...]


def failure_list(items: list[FailureItem]) -> dict[str, Any]:
    return to_json(FailureList(tuple(items)))


@dataclass(frozen=True)
class CaptureParams:
    uri: str  # file URI of the script


@dataclass(frozen=True)
class CaptureCommand:
    argv: tuple[str, ...]  # `python -m minifier capture --dir <folder> -- <the script's command line>`
    cwd: str  # the script's workspace folder
    title: str  # a name for the terminal


@dataclass(frozen=True)
class Settings:
    """`initializationOptions`, and `workspace/didChangeConfiguration`'s settings (`Settings` or `{aoti: Settings}`)."""

    python: str = sys.executable  # interpreter that runs aoti-minify
    workers: int | None = None  # parallel minifier workers (null: the minifier's default)
    devices: str = ""  # GPU ids the workers may use, e.g. "0,1" ("": all visible)
    timeout: float | None = None  # seconds one candidate may run (null: the minifier's default)
    keep_warm: float = KEEP_WARM_SECONDS  # seconds a process with torch imported waits for the next job (0: start cold)
    debug_dir_roots: tuple[str, ...] = ()  # more folders to scan for dumps (relative: to the first workspace folder)
    imports: tuple[str, ...] = ()  # modules every minifier worker imports first (custom-op libraries): --import
    auto_reproduce: bool = True  # run `aoti-minify run` on discovery (never when untrusted)
    capture_command: str = ""  # what Capture runs instead of `python <file>` ("": that); `${file}`: the script
    trusted: bool = False  # VS Code's workspace trust; nothing runs until it is true

    def merged(self, data: Any) -> tuple[Settings, list[str]]:
        """These settings updated from client JSON (`Settings` or `{aoti: Settings}`).

        Keys the client leaves out keep their current value, so a configuration change that only
        carries the `aoti` section cannot silently drop workspace trust. Bad values are reported
        and ignored rather than failing the whole update.
        """
        data = plain_json(data)
        if isinstance(data, dict) and isinstance(data.get(SETTINGS_SECTION), dict):
            data = data[SETTINGS_SECTION]
        if data is None:
            return self, []
        if not isinstance(data, dict):
            return self, [f"settings must be an object, got {type(data).__name__}"]
        changes: dict[str, Any] = {}
        problems: list[str] = []
        for f in dataclasses.fields(self):
            key = camel(f.name)
            if key not in data:
                continue
            value = _SETTING_CHECKS[f.name](data[key])
            if value is _BAD:
                problems.append(f"setting {key}={data[key]!r} ignored: expected {_SETTING_TYPES[f.name]}")
            else:
                changes[f.name] = value
        return dataclasses.replace(self, **changes), problems


_BAD = object()


def _check(ok: Any, convert: Any = lambda v: v) -> Any:
    return lambda v: convert(v) if ok(v) else _BAD


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_SETTING_CHECKS = {
    # null or "" mean the default, as an unset VS Code setting sends them
    "python": _check(
        lambda v: v is None or isinstance(v, str),
        lambda v: os.path.expanduser(v.strip()) if v and v.strip() else Settings.python,
    ),
    "workers": _check(lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)),
    "devices": _check(lambda v: v is None or isinstance(v, str), lambda v: v or Settings.devices),
    "timeout": _check(lambda v: v is None or (_is_number(v) and v > 0), lambda v: None if v is None else float(v)),
    "keep_warm": _check(
        lambda v: v is None or (_is_number(v) and v >= 0), lambda v: Settings.keep_warm if v is None else float(v)
    ),
    "debug_dir_roots": _check(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), tuple),
    "imports": _check(lambda v: isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v), tuple),
    "auto_reproduce": _check(lambda v: isinstance(v, bool)),
    "capture_command": _check(lambda v: v is None or isinstance(v, str), lambda v: (v or "").strip()),
    "trusted": _check(lambda v: isinstance(v, bool)),
}
_SETTING_TYPES = {
    "python": "a path to a Python interpreter",
    "workers": "an integer >= 1",
    "devices": "a string like '0,1'",
    "timeout": "seconds > 0",
    "keep_warm": "seconds >= 0",
    "debug_dir_roots": "a list of folder paths",
    "imports": "a list of module names",
    "auto_reproduce": "true or false",
    "capture_command": "a command line",
    "trusted": "true or false",
}

DocKind = Literal["graph", "original", "kernel", "shrink"]
VIRTUAL_DOCS: dict[DocKind, str] = {
    "graph": f"{SCHEME}:/{{id}}/graph.py",  # the smallest failing graph so far, refreshed at every checkpoint
    "original": f"{SCHEME}:/{{id}}/original.py",  # the graph the minification started from
    "kernel": f"{SCHEME}:/{{id}}/kernels/{{kernel}}.py",  # the failing kernel's source, its error line marked
    "shrink": f"{SCHEME}:/{{id}}/shrink.md",  # the shrink curve (nodes over time, each checkpoint a point) and the final graph
}
_VIRTUAL = {
    kind: re.compile(
        re.escape(template)
        .replace(":/", ":/+", 1)
        .replace(r"\{id\}", "(?P<id>[^/]+)")
        .replace(r"\{kernel\}", "(?P<kernel>[^/]+)")
    )
    for kind, template in VIRTUAL_DOCS.items()
}


@dataclass(frozen=True)
class VirtualDoc:
    failure_id: str
    kind: DocKind
    kernel: str | None = None


def graph_uri(failure_id: str) -> str:
    return VIRTUAL_DOCS["graph"].format(id=failure_id)


def original_uri(failure_id: str) -> str:
    return VIRTUAL_DOCS["original"].format(id=failure_id)


def kernel_uri(failure_id: str, kernel: str) -> str:
    return VIRTUAL_DOCS["kernel"].format(id=failure_id, kernel=kernel)


def shrink_uri(failure_id: str) -> str:
    return VIRTUAL_DOCS["shrink"].format(id=failure_id)


def parse_uri(uri: str) -> VirtualDoc | None:
    text = unquote(uri)
    for kind, pattern in _VIRTUAL.items():
        if (found := pattern.fullmatch(text)) is not None:
            return VirtualDoc(found["id"], kind, found.groupdict().get("kernel"))
    return None
