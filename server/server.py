"""The aoti-lens language server object: settings, known failures, jobs, and publishing.

Feature modules (discovery, documents, hover, actions) register their handlers on it; all mutable
state lives here. Publishing is batched: any change marks the server dirty and one flush per event
loop turn sends the diagnostics that changed and one `aoti/failuresChanged`.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from typing import Any, Generator

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.uris import to_fs_path

from . import __version__, actions, diagnostics, discovery, documents, hover
from .failures import FailureStore
from .jobs import Jobs
from .protocol import FAILURES, FAILURES_CHANGED, SCHEME, Settings, experimental_capabilities, failure_list


class AotiProtocol(LanguageServerProtocol):
    """Advertises `workspace.textDocumentContent`, which pygls 2.1.1 handles but does not announce, and the
    aoti-lens protocol version."""

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        result = yield from super().lsp_initialize(params)
        workspace = result.capabilities.workspace or types.WorkspaceOptions()
        workspace.text_document_content = types.TextDocumentContentOptions(schemes=[SCHEME])
        result.capabilities.workspace = workspace
        result.capabilities.experimental = experimental_capabilities()
        return result


class AotiLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("aoti-lsp", __version__, protocol_cls=AotiProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.None_)
        self.settings = Settings()
        self.failures = FailureStore()
        self.jobs = Jobs(self)
        self.watch_registration: str | None = None
        self._flush_pending = False
        self._published: dict[str, list[types.Diagnostic]] = {}
        self._listed: dict[str, Any] | None = None
        self._refresh_broken = False

    def log(self, message: str, level: types.MessageType = types.MessageType.Info) -> None:
        self.window_log_message(types.LogMessageParams(type=level, message=message))

    def log_exception(self, message: str, error: BaseException) -> None:
        cause = f" (caused by {type(error.__cause__).__name__}: {error.__cause__})" if error.__cause__ else ""
        details = "".join(traceback.format_exception(type(error), error, error.__traceback__, chain=False))
        self.log(f"{message}: {error}{cause}\n{details}", types.MessageType.Error)

    def tell(self, message: str, level: types.MessageType = types.MessageType.Warning) -> None:
        self.window_show_message(types.ShowMessageParams(type=level, message=message))

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Log instead of pygls' "Error in server" pop-up: one bad message must not spam the user."""
        self.log_exception(f"aoti-lsp internal error ({getattr(source, '__name__', source)})", error)

    @property
    def supports_progress(self) -> bool:
        window = self.client_capabilities.window
        return bool(window and window.work_done_progress)

    @property
    def supports_show_document(self) -> bool:
        window = self.client_capabilities.window
        return bool(window and window.show_document and window.show_document.support)

    @property
    def supports_refresh(self) -> bool:
        workspace = self.client_capabilities.workspace
        return bool(workspace and workspace.text_document_content is not None) and not self._refresh_broken

    def folders(self) -> list[str]:
        folders = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
        return [os.path.abspath(f) for f in folders if f] or \
            ([os.path.abspath(self.workspace.root_path)] if self.workspace.root_path else [])

    def debug_roots(self) -> list[str]:
        """settings.debugDirRoots, relative ones against the first workspace folder."""
        base = next(iter(self.folders()), os.getcwd())
        return [os.path.abspath(os.path.join(base, os.path.expanduser(r))) for r in self.settings.debug_dir_roots]

    def roots(self) -> list[str]:
        return list(dict.fromkeys(self.folders() + self.debug_roots()))

    def changed(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        records = self.failures.records()
        current = diagnostics.collect(records)
        for uri in sorted(set(current) | set(self._published)):
            if current.get(uri, []) != self._published.get(uri, []):
                self.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=uri, diagnostics=current.get(uri, [])))
        self._published = current
        listed = failure_list([r.item() for r in records])
        if listed != self._listed:
            self._listed = listed
            self.protocol.notify(FAILURES_CHANGED, listed)

    def refresh_document(self, uri: str) -> None:
        if not self.supports_refresh:
            return
        future = self.workspace_text_document_content_refresh(types.TextDocumentContentRefreshParams(uri=uri))

        def done(f: Any) -> None:
            if not f.cancelled() and f.exception() is not None and not self._refresh_broken:
                self._refresh_broken = True
                self.log(f"the client rejected workspace/textDocumentContent/refresh ({f.exception()}); "
                         "reopen aoti: documents to see updates", types.MessageType.Warning)

        future.add_done_callback(done)

    async def show(self, uri: str, what: str) -> None:
        """Open a document in the editor, or say where it is when the client cannot be asked to."""
        if not self.supports_show_document:
            self.tell(f"{what}: {uri}", types.MessageType.Info)
            return
        try:
            result = await self.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))
        except Exception as e:  # the client failed to open it; the user still gets the location
            self.tell(f"could not open {what} ({e}): {uri}", types.MessageType.Warning)
            return
        if not result.success:
            self.log(f"the client did not open {uri}", types.MessageType.Warning)

    async def apply_settings(self, data: Any) -> None:
        old = self.settings
        self.settings, problems = old.merged(data)
        for problem in problems:
            self.log(problem, types.MessageType.Warning)
        if old.trusted and not self.settings.trusted:
            await self.jobs.stop_all("the workspace is no longer trusted")
        if self.settings.debug_dir_roots != old.debug_dir_roots:
            await discovery.watch(self)
            await discovery.rescan(self)
        elif self.settings.trusted and not old.trusted:
            discovery.start_background_work(self, self.failures.records())


def create_server() -> AotiLanguageServer:
    ls = AotiLanguageServer()

    @ls.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        ls.settings, problems = Settings().merged(params.initialization_options)
        for problem in problems:
            ls.log(problem, types.MessageType.Warning)

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        await ls.apply_settings(params.settings)

    @ls.feature(FAILURES)
    def failures(params: Any) -> dict[str, Any]:
        return failure_list([r.item() for r in ls.failures.records()])

    @ls.feature(types.SHUTDOWN)
    async def shutdown(params: None) -> None:
        await ls.jobs.stop_all("the server is shutting down")

    @ls.feature(types.EXIT)
    def exit_(params: None) -> None:
        ls.jobs.kill_all()

    for module in (discovery, documents, hover, actions):
        module.register(ls)
    return ls
