"""Helpers for the aoti-lsp end-to-end tests (pytest puts this folder on sys.path).

A pytest-lsp client that also answers the server's registerCapability and
textDocumentContent/refresh requests, a session context manager, waiting helpers, and torch-free
fake dumps and fake minifiers for the robustness tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, Union

from lsprotocol import types
from pygls.protocol import default_converter
from pygls.uris import from_fs_path
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from minifier.contract.events import Failure, SourceLine, encode_event
from minifier.contract.signature import KernelRef, Signature
from minifier.contract.wire import dumps as wire_dumps
from server.protocol import CAPABILITY, PROTOCOL_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = [sys.executable, "-m", "server", "--stdio"]
T = TypeVar("T")


class AotiClient(LanguageClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registrations: list[types.Registration] = []
        self.refreshes: list[tuple[str, str]] = []  # (uri, its text fetched on the refresh)
        self.refresh_delay = 0.0  # seconds before fetching a refreshed document: a client on a busy machine
        self.failing_refreshes = 0  # refresh requests still to be answered with an error
        self.fetches: set[asyncio.Task[None]] = set()  # documents being fetched again after a refresh
        self.failure_lists: list[list[dict[str, Any]]] = []
        self.unlisted: list[str] = []  # failure ids that diagnostics named before the failure list had them
        self.initialize_result: types.InitializeResult | None = None

    def item(self, launcher: str) -> dict[str, Any] | None:
        """The latest `aoti/failuresChanged` entry of the failure with this launcher."""
        wanted = uri(launcher)
        items = self.failure_lists[-1] if self.failure_lists else []
        return next((i for i in items if i["launcher"] == wanted), None)

    def state(self, launcher: str) -> str | None:
        item = self.item(launcher)
        return item["state"] if item else None

    async def diagnostics_on(self, path: str, pattern: str = "", timeout: float = 30.0) -> list[types.Diagnostic]:
        """The diagnostics on `path` once one of them matches `pattern`. The server publishes the failure
        list before the diagnostics of the same change, so a state seen in `item` may not have its
        diagnostics here yet: wait for them rather than read them."""
        return await until(
            lambda: (
                (found := self.diagnostics.get(uri(path), []))
                and any(re.search(pattern, d.message) for d in found)
                and found
            ),
            f"a diagnostic on {path} matching {pattern!r}",
            timeout,
        )

    async def failures(self) -> list[dict[str, Any]]:
        return plain(await self.protocol.send_request_async("aoti/failures", {}))["failures"]

    async def command(self, name: str, *arguments: Any) -> Any:
        return await self.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(arguments))
        )

    async def content(self, doc_uri: str) -> str:
        result = await self.workspace_text_document_content_async(types.TextDocumentContentParams(uri=doc_uri))
        return result.text

    async def hover(self, doc_uri: str, line: int) -> types.Hover | None:
        return await self.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=doc_uri), position=types.Position(line=line, character=4)
            )
        )

    async def code_actions(self, doc_uri: str, diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
        result = await self.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=doc_uri),
                range=diagnostics[0].range,
                context=types.CodeActionContext(diagnostics=diagnostics),
            )
        )
        return [a for a in result or [] if isinstance(a, types.CodeAction)]

    def refreshed(self, doc_uri: str) -> list[str]:
        """The texts fetched on each refresh of this document, in order."""
        return [text for u, text in self.refreshes if u == doc_uri]

    async def refreshed_until(self, doc_uri: str, state: str, timeout: float = 30.0) -> list[str]:
        """Every text fetched on a refresh of this graph document, once one shows `state` in its header.
        The client records a refresh only after fetching the document again: right after the event that
        caused it, the refresh may still be on its way."""
        return await until(
            lambda: [t for t in self.refreshed(doc_uri) if f"\n# {state}:" in t] and self.refreshed(doc_uri),
            f"a refresh of {doc_uri} showing {state}",
            timeout,
        )

    def minified_nodes(self, doc_uri: str) -> list[int]:
        """The node count each refresh of a graph document showed while its failure was minified."""
        texts = [t for t in self.refreshed(doc_uri) if re.match(r"[^\n]*\n# (minifying|minimized):", t)]
        return [int(re.match(r"# (?:\d+ -> )*(\d+) nodes", t)[1]) for t in texts]

    def logged(self, pattern: str) -> list[re.Match[str]]:
        return [m for m in (re.search(pattern, p.message) for p in self.log_messages) if m]


def converter() -> Any:
    """lsprotocol 2025.0.0 reads every CodeAction that carries a `command` as a Command (its union
    hook only checks for the key); a CodeAction's `command` is an object, a Command's a string."""
    conv = default_converter()

    def command_or_action(obj: Any, _: type) -> types.Command | types.CodeAction:
        kind = types.Command if isinstance(obj.get("command"), str) else types.CodeAction
        return conv.structure(obj, kind)

    conv.register_structure_hook(Union[types.Command, types.CodeAction], command_or_action)  # noqa: UP007 (the exact type lsprotocol registers)
    return conv


def make_client() -> AotiClient:
    client = AotiClient(converter_factory=converter)
    register_lsp_features(
        client, {m: f for m, f in DEFAULT_CLIENT_FEATURES.items() if m != types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS}
    )

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def publish_diagnostics(params: types.PublishDiagnosticsParams) -> None:
        """Kept as pytest-lsp keeps them; a client resolves a diagnostic's failureId (its quick fixes) in the
        failure list it has, so each one named before that list had it is noted."""
        listed = {i["id"] for i in client.failure_lists[-1]} if client.failure_lists else set()
        named = [d.data.get("failureId") for d in params.diagnostics if isinstance(d.data, dict)]
        client.unlisted += [f for f in named if f and f not in listed]
        client.diagnostics[params.uri] = params.diagnostics

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register_capability(params: types.RegistrationParams) -> None:
        client.registrations.extend(params.registrations)

    @client.feature(types.CLIENT_UNREGISTER_CAPABILITY)
    def unregister_capability(params: types.UnregistrationParams) -> None:
        gone = {u.id for u in params.unregisterations}
        client.registrations[:] = [r for r in client.registrations if r.id not in gone]

    @client.feature(types.WORKSPACE_TEXT_DOCUMENT_CONTENT_REFRESH)
    def refresh(params: types.TextDocumentContentRefreshParams) -> None:
        """Answered at once and the document fetched afterwards, as VS Code does (a handler still
        waiting when the server exits trips pygls' client)."""
        if client.failing_refreshes:
            client.failing_refreshes -= 1
            raise RuntimeError("this client fails a refresh on purpose")
        task = asyncio.get_running_loop().create_task(fetch(params.uri))
        client.fetches.add(task)
        task.add_done_callback(client.fetches.discard)

    async def fetch(doc_uri: str) -> None:
        await asyncio.sleep(client.refresh_delay)
        client.refreshes.append((doc_uri, await client.content(doc_uri)))

    @client.feature("aoti/failuresChanged")
    def failures_changed(params: Any) -> None:
        client.failure_lists.append(plain(params)["failures"])

    return client


def vscode_capabilities(protocol_version: int | None = PROTOCOL_VERSION) -> types.ClientCapabilities:
    """VS Code's, plus the LSP 3.18 textDocumentContent client capability vscode-languageclient 10 sends,
    and what the aoti-lens extension announces (its protocol version; None: like another editor)."""
    capabilities = client_capabilities("visual-studio-code")
    assert capabilities.workspace is not None
    capabilities.workspace.text_document_content = types.TextDocumentContentClientCapabilities(
        dynamic_registration=True
    )
    if protocol_version is not None:
        capabilities.experimental = {CAPABILITY: {"protocolVersion": protocol_version}}
    return capabilities


@contextlib.asynccontextmanager
async def lsp_session(
    workspace: str,
    settings: dict[str, Any] | None = None,
    capabilities: types.ClientCapabilities | None = None,
    env: dict[str, str] | None = None,
    folders: list[str] | None = None,
) -> AsyncIterator[AotiClient]:
    config = ClientServerConfig(
        server_command=SERVER, client_factory=make_client, server_env={**os.environ, **(env or {})}
    )
    client = await config.start()
    assert isinstance(client, AotiClient)
    try:
        client.initialize_result = await client.initialize_session(
            types.InitializeParams(
                capabilities=capabilities or vscode_capabilities(),
                workspace_folders=[
                    types.WorkspaceFolder(uri=uri(f), name=os.path.basename(f)) for f in folders or [workspace]
                ],
                root_uri=uri(workspace),
                initialization_options=settings or {},
            )
        )
        yield client
    finally:
        for task in client.fetches:
            task.cancel()
        try:
            await asyncio.wait_for(client.shutdown_session(), 30)
        except Exception:
            if client._server is not None and client._server.returncode is None:
                client._server.kill()
        await client.stop()


def uri(path: str | os.PathLike[str]) -> str:
    return from_fs_path(os.path.abspath(path)) or str(path)


def plain(obj: Any) -> Any:
    """pygls hands untyped JSON over as namedtuples; tests want dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [plain(x) for x in obj]
    return obj


async def until(check: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


def processes_in(folder: str) -> list[int]:
    """Processes whose working directory is inside `folder` (minifier drivers and workers are)."""
    folder = os.path.realpath(folder)
    pids = []
    for entry in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd") if entry.isdigit() else ""
        except OSError:
            continue
        if cwd == folder or cwd.startswith(folder + os.sep):
            pids.append(int(entry))
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


FAKE_LAUNCHER = """\
import os
import torch
import torch._inductor.config
torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'
# torch version: 2.13.0+cpu
exported_program = torch.export.load({pt2!r})
config_patches = {{}}
if __name__ == '__main__':
    from torch._dynamo.repro.aoti import run_repro
    with torch.no_grad():
        run_repro(exported_program, config_patches=config_patches, accuracy=False, command='minify',
                  save_dir=None, check_str=None)
"""
FAKE_RUN_REPRO_LINE = 10
FAKE_KERNEL = '#include <cstdint>\nextern "C" void cpp_fused_relu_0(float* p)\n{\n    auto tmp1 = compile error!;\n}\n'


def fake_dump(
    dest: str, run: str = "run_2026_01_01_00_00_00_000000-pid_1", failure: bool = True, launcher_text: str | None = None
) -> str:
    """A torch-free stand-in for a PyTorch dump: launcher, (empty) .pt2 and, if asked, failure.json
    naming a kernel file and a model line under `dest`. Returns the launcher's path."""
    folder = os.path.join(dest, "torch_compile_debug", run, "minifier")
    os.makedirs(os.path.join(folder, "checkpoints"), exist_ok=True)
    pt2 = os.path.join(folder, "checkpoints", "exported_program.pt2")
    with open(pt2, "wb") as f:
        f.write(b"not a real program")
    launcher = os.path.join(folder, "minifier_launcher.py")
    write(launcher, launcher_text if launcher_text is not None else FAKE_LAUNCHER.format(pt2=pt2))
    if failure:
        kernel = write(os.path.join(dest, "kernels", "ck.kernel.cpp"), FAKE_KERNEL)
        model = write(os.path.join(dest, "model.py"), "import torch\n\ndef forward(x):\n    return torch.relu(x)\n")
        write(os.path.join(folder, "failure.json"), wire_dumps(fake_failure(launcher, kernel, model)))
    return launcher


def fake_failure(launcher: str, kernel: str, model: str) -> Failure:
    return Failure(
        launcher=launcher,
        signature=Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error"),
        headline="‘compile’ was not declared in this scope",
        details="g++ said no",
        kernel=KernelRef(
            name="cpp_fused_relu_0", file=kernel, line=4, column=17, source_nodes=["relu"], aten_ops=["relu"]
        ),
        kernel_source=FAKE_KERNEL,
        model_lines=[SourceLine(file=model, line=4, node="relu", code="return torch.relu(x)")],
        nodes=5,
        graph="def forward(self, x):\n    relu = torch.ops.aten.relu.default(x)\n    return (relu,)",
    )


def write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def python_minifying_with(path: str, *options: str) -> str:
    """An interpreter setting: this Python, with `options` added to each `python -m minifier minify`."""
    added = " ".join(shlex.quote(o) for o in options)
    python = shlex.quote(sys.executable)
    write(path, f'#!/bin/sh\nif [ "$3" = minify ]; then exec {python} "$@" {added}; fi\nexec {python} "$@"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def fake_python(path: str, events: list[Any], tail: str = "exit 0", before: str = "", pause: float = 0.0) -> str:
    """A stand-in for the minifier's interpreter: a shell script that ignores its arguments, runs
    `before`, prints these events (objects, or raw strings for garbage), `pause` seconds apart,
    and then runs `tail`."""
    lines = [e if isinstance(e, str) else encode_event(e) for e in events]
    body = "".join(f"cat <<'EVENT'\n{line}\nEVENT\n" + (f"sleep {pause}\n" if pause else "") for line in lines)
    write(path, f"#!/bin/sh\n{before}\n{body}{tail}\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path
