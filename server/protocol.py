"""The language server <-> client contract of docs/protocol.md (server side; the client's twin is
vscode-client/src/protocol.ts).

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

FAILURES = "aoti/failures"
FAILURES_CHANGED = "aoti/failuresChanged"
SCHEME = "aoti"

MINIFY = "aoti.minify"
REPRODUCE = "aoti.reproduce"
CANCEL = "aoti.cancel"
OPEN_REPRO = "aoti.openRepro"
SHOW_GRAPH = "aoti.showGraph"
SHOW_KERNEL = "aoti.showKernel"

State = Literal["found", "reproducing", "reproduced", "minifying", "minimized", "cancelled", "error"]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def to_json(obj: Any) -> dict[str, Any]:
    return {camel(f.name): getattr(obj, f.name) for f in dataclasses.fields(obj)}


@dataclass(frozen=True)
class FailureItem:
    id: str
    label: str
    run_dir: str
    launcher: str
    state: State
    signature: str | None
    kind: str | None
    nodes_start: int | None
    nodes_now: int | None
    queries: int | None
    seconds: float | None
    message: str | None
    repro: str | None
    graph_uri: str
    kernel_uri: str | None


def failure_list(items: list[FailureItem]) -> dict[str, Any]:
    return {"failures": [to_json(item) for item in items]}


@dataclass(frozen=True)
class Settings:
    python: str = sys.executable
    workers: int | None = None
    devices: str = ""
    timeout: float | None = None
    keep_warm: float = 600.0
    debug_dir_roots: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    auto_reproduce: bool = True
    trusted: bool = False

    def merged(self, data: Any) -> tuple[Settings, list[str]]:
        """These settings updated from client JSON (`Settings` or `{aoti: Settings}`).

        Keys the client leaves out keep their current value, so a configuration change that only
        carries the `aoti` section cannot silently drop workspace trust. Bad values are reported
        and ignored rather than failing the whole update.
        """
        if isinstance(data, dict) and isinstance(data.get("aoti"), dict):
            data = data["aoti"]
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
    "python": _check(lambda v: v is None or isinstance(v, str),
                     lambda v: os.path.expanduser(v.strip()) if v and v.strip() else sys.executable),
    "workers": _check(lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)),
    "devices": _check(lambda v: v is None or isinstance(v, str), lambda v: v or ""),
    "timeout": _check(lambda v: v is None or (_is_number(v) and v > 0), lambda v: None if v is None else float(v)),
    "keep_warm": _check(lambda v: v is None or (_is_number(v) and v >= 0), lambda v: 600.0 if v is None else float(v)),
    "debug_dir_roots": _check(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), tuple),
    "imports": _check(lambda v: isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v), tuple),
    "auto_reproduce": _check(lambda v: isinstance(v, bool)),
    "trusted": _check(lambda v: isinstance(v, bool)),
}
_SETTING_TYPES = {
    "python": "a path to a Python interpreter", "workers": "an integer >= 1", "devices": "a string like '0,1'",
    "timeout": "seconds > 0", "keep_warm": "seconds >= 0", "debug_dir_roots": "a list of folder paths",
    "imports": "a list of module names", "auto_reproduce": "true or false",
    "trusted": "true or false",
}

DocKind = Literal["graph", "original", "kernel"]
_VIRTUAL = re.compile(r"aoti:/+(?P<id>[^/]+)/(?:(?P<doc>graph|original)\.py|kernels/(?P<kernel>[^/]+)\.py)")


@dataclass(frozen=True)
class VirtualDoc:
    failure_id: str
    kind: DocKind
    kernel: str | None = None


def graph_uri(failure_id: str) -> str:
    return f"{SCHEME}:/{failure_id}/graph.py"


def original_uri(failure_id: str) -> str:
    return f"{SCHEME}:/{failure_id}/original.py"


def kernel_uri(failure_id: str, kernel: str) -> str:
    return f"{SCHEME}:/{failure_id}/kernels/{kernel}.py"


def parse_uri(uri: str) -> VirtualDoc | None:
    found = _VIRTUAL.fullmatch(unquote(uri))
    if found is None:
        return None
    if found["kernel"]:
        return VirtualDoc(found["id"], "kernel", found["kernel"])
    return VirtualDoc(found["id"], found["doc"])
