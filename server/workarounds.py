"""A verified workaround where the user compiles: once `aoti-minify triage` has verified Inductor configs on
the original model (triage.json), each call in the workspace's Python files that compiles as the failure's did,
`aoti_compile_and_package(...)` or `torch.compile(...)` (minifier.contract.calls), gets an Information diagnostic
and a quick fix that adds them as `inductor_configs={...}` or `options={...}`, merged into a dict the call passes
already; a workaround that is code (one op left to ATen) is inserted above the call's line. The edit is a
WorkspaceEdit: the editor applies it, and undoes it, like any other.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import to_fs_path

from minifier.contract.calls import CALLS, CompileCall
from minifier.contract.events import Workaround, change_of, registration

from .failures import FailureRecord, uri_of
from .feature import Feature

if TYPE_CHECKING:
    from .server import AotiLanguageServer

SOURCE = "aoti-lens"
CODE = "workaround"
SKIPPED_FOLDERS = {"node_modules", "__pycache__", "torch_compile_debug", "site-packages", "build", "dist"}
MAX_FILES = 5000
MAX_BYTES = 2 << 20


def compile_calls(text: str, call: CompileCall) -> list[int]:
    """The (0-based) lines that make `call`, comments and definitions aside."""
    lines = text.splitlines()
    return [i for i, line in enumerate(lines) if call.pattern.search(line.split("#")[0]) and "def " not in line]


def call_edit(text: str, line: int, configs: dict[str, Any], call: CompileCall) -> types.TextEdit | None:
    """The edit that makes the call starting on `line` pass `configs` as its keyword: added as a keyword,
    or merged ahead of the entries of a dict literal it passes (the user's entries win), or around a name it
    passes (`{**theirs, ...}`). None when the call is not found whole, or passes them already."""
    starts = _offsets(text)
    if line >= len(starts):
        return None
    line_end = starts[line + 1] if line + 1 < len(starts) else len(text)
    found = call.pattern.search(text, starts[line], line_end)
    if found is None:
        return None
    close = _closing(text, found.end())
    if close is None:
        return None
    args = text[found.end() : close]
    entries = ", ".join(f"{k!r}: {v!r}" for k, v in configs.items())
    keyword = re.search(rf"\b{call.keyword}\s*=\s*", args)
    if keyword is None:
        body = args.rstrip()
        at = found.end() + len(body)
        added = f"{call.keyword}={{{entries}}}"
        if body.endswith(",") and "\n" in args:  # one argument a line: one more line, indented as the last
            last = body[body.rfind("\n") + 1 :]
            return _insert(text, at, f"\n{last[: len(last) - len(last.lstrip())]}{added},")
        separator = "" if not body.strip() else " " if body.endswith(",") else ", "
        return _insert(text, at, f"{separator}{added}")
    value_at = found.end() + keyword.end()
    if all(f"{k!r}" in args[keyword.end() :] for k in configs):
        return None
    if text.startswith("{", value_at):
        return _insert(text, value_at + 1, f"{entries}, " if text[value_at + 1 : value_at + 2] != "}" else entries)
    name = re.match(r"[\w.]+", text[value_at:])
    if name is None:
        return None
    return _replace(text, value_at, value_at + name.end(), f"{{**{name.group()}, {entries}}}")


def code_edit(text: str, line: int, code: str) -> types.TextEdit | None:
    """The edit that runs `code` just before the statement on `line`, at its indentation; None when the file has
    the code's registration (its last line) already."""
    lines = text.splitlines()
    if line >= len(lines) or registration(code) in text:
        return None
    indent = lines[line][: len(lines[line]) - len(lines[line].lstrip())]
    block = "".join(f"{indent}{row}\n" for row in code.splitlines())
    return _insert(text, _offsets(text)[line], block)


def workaround_edit(text: str, line: int, workaround: dict[str, Any]) -> types.TextEdit | None:
    """The edit a diagnostic's data (`code` or `inductorConfigs`, for the call its `kind` of failure makes) asks
    for at the call on `line`."""
    code, configs = workaround.get("code"), workaround.get("inductorConfigs")
    if isinstance(code, str) and code:
        return code_edit(text, line, code)
    call = CALLS.get(workaround.get("kind", "aoti"))
    return call_edit(text, line, configs, call) if isinstance(configs, dict) and call else None


def _offsets(text: str) -> list[int]:
    offsets, at = [], 0
    for line in text.splitlines(keepends=True):
        offsets.append(at)
        at += len(line)
    return offsets


def _closing(text: str, start: int) -> int | None:
    """Where the parenthesis opened just before `start` closes (strings and comments skipped)."""
    depth, i, quote = 1, start, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif text.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif c in "'\"":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote) - 1
        elif c == "#":
            i = text.find("\n", i)
            if i < 0:
                return None
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _position(text: str, offset: int) -> types.Position:
    line = text.count("\n", 0, offset)
    return types.Position(line=line, character=offset - (text.rfind("\n", 0, offset) + 1))


def _insert(text: str, at: int, new: str) -> types.TextEdit:
    return _replace(text, at, at, new)


def _replace(text: str, start: int, end: int, new: str) -> types.TextEdit:
    return types.TextEdit(range=types.Range(start=_position(text, start), end=_position(text, end)), new_text=new)


def _python_files(folder: str) -> Iterator[str]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS]
        yield from (os.path.join(root, f) for f in files if f.endswith(".py"))


def scan(folders: list[str]) -> dict[str, str]:
    """Each Python file of the workspace that compiles (any of the calls), and its text."""
    calls: dict[str, str] = {}
    for count, path in enumerate(p for folder in folders for p in _python_files(folder)):
        if count >= MAX_FILES:
            break
        text = _read(path)
        if text is not None and _compiles(text):
            calls[path] = text
    return calls


def _compiles(text: str) -> bool:
    return any(compile_calls(text, call) for call in CALLS.values())


def _read(path: str) -> str | None:
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _message(record: FailureRecord, workaround: Workaround) -> str:
    signature = record.signature.describe() if record.signature else "?"
    error = "" if workaround.max_abs_error is None else f", max abs error {workaround.max_abs_error:.2g} vs eager"
    change = workaround.describe(record.call)
    how = f"with {change} run before it" if workaround.code else f"with {change}"
    return (
        f"{record.noun} {record.id} ({signature}) compiles {how}: "
        f"verified on the original model by aoti-lens triage ({workaround.family}{error})"
    )


def _verified(records: list[FailureRecord]) -> list[tuple[FailureRecord, Workaround]]:
    return [(r, r.triage.workarounds[0]) for r in records if r.triage and r.triage.workarounds]


class Workarounds(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self.calls: dict[str, str] = {}  # each file that compiles (aoti_compile_and_package, torch.compile): its text
        self._scanned_for: set[str] = set()
        self._scan: asyncio.Task[None] | None = None

    def register(self) -> None:
        # The server asks for no edits as they are typed (text sync None: it stays light); a saved file is
        # read again, so a call that passes the workaround now loses its diagnostic.
        @self.ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
        def saved(params: types.DidSaveTextDocumentParams) -> None:
            self._rescan_file(params.text_document.uri)

    def failures_changed(self, records: list[FailureRecord]) -> None:
        wanted = {r.id for r, _ in _verified(records)}
        if wanted and not wanted <= self._scanned_for and (self._scan is None or self._scan.done()):
            self._scanned_for |= wanted
            self._scan = asyncio.get_running_loop().create_task(self._scan_workspace())

    async def _scan_workspace(self) -> None:
        self.calls = await asyncio.to_thread(scan, self.ls.folders())
        self.ls.log(f"workarounds: {len(self.calls)} file(s) call aoti_compile_and_package or torch.compile")
        self.ls.changed()

    def _rescan_file(self, uri: str) -> None:
        path = to_fs_path(uri)
        if not path or not path.endswith(".py") or not _verified(self.ls.failures.records()):
            return
        text = _read(path) or ""
        if text == self.calls.get(path) or (path not in self.calls and not _compiles(text)):
            return
        others = {k: v for k, v in self.calls.items() if k != path}
        self.calls = {**others, path: text} if _compiles(text) else others
        self.ls.changed()

    def diagnostics(self, records: list[FailureRecord]) -> Iterator[tuple[str, types.Diagnostic]]:
        for record, workaround in _verified(records):
            kind = record.spec.kind if record.spec else "aoti"
            data = {
                "failureId": record.id,
                "inductorConfigs": workaround.inductor_configs,
                "code": workaround.code,
                "kind": kind,
            }
            for path, text in self.calls.items():
                for line in compile_calls(text, CALLS[kind]):
                    if workaround_edit(text, line, data) is None:  # it has it already (or the call is not whole)
                        continue
                    yield (
                        uri_of(path),
                        types.Diagnostic(
                            range=types.Range(
                                start=types.Position(line=line, character=0),
                                end=types.Position(line=line + 1, character=0),
                            ),
                            severity=types.DiagnosticSeverity.Information,
                            source=SOURCE,
                            code=CODE,
                            message=_message(record, workaround),
                            data=data,
                        ),
                    )

    def quick_fixes(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        actions = []
        for diagnostic in params.context.diagnostics:
            data: Any = diagnostic.data
            if diagnostic.code != CODE or not isinstance(data, dict):
                continue
            path = to_fs_path(uri)
            text = _read(path) if path else None  # as saved: the server is not sent unsaved edits
            edit = workaround_edit(text, diagnostic.range.start.line, data) if text is not None else None
            if edit is None:
                continue
            call = CALLS.get(data.get("kind", "aoti"), CALLS["aoti"])
            change = change_of(data.get("inductorConfigs") or {}, data.get("code") or "", call)
            title = f"Compile with the verified workaround: {change}"
            actions.append(
                types.CodeAction(
                    title=title,
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    is_preferred=True,
                    edit=types.WorkspaceEdit(changes={uri: [edit]}),
                )
            )
        return actions
