"""The aoti-lens language server object: settings, known failures, and the features.

All mutable state hangs off this one object. Each feature (server/feature.py: discovery, jobs,
documents, hover, actions, diagnostics, the failure list) registers its own handlers and follows the
server's life through hooks that the lifecycle handlers here call on all of them in turn. Publishing
is batched: any change marks the server dirty, and one flush per event loop turn has every feature
publish what it shows of the failures (the diagnostics that changed, one `aoti/failuresChanged`).
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

from . import __version__
from .actions import Actions
from .diagnostics import Diagnostics
from .discovery import Discovery
from .documents import Documents
from .failure_list import FailureList
from .failures import FailureStore
from .feature import Feature
from .hover import Hover
from .jobs import Jobs
from .protocol import SCHEME, Settings, experimental_capabilities


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
        self.discovery = Discovery(self)
        self.documents = Documents(self)
        # Hooks run in this order: on a settings change, jobs stop before discovery starts new ones.
        self.features: list[Feature] = [self.jobs, self.discovery, self.documents, Hover(self), Actions(self),
                                        Diagnostics(self), FailureList(self)]
        self._flush_pending = False
        self.shutting_down = False  # the client asked for shutdown: answer, but ask it nothing more

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
        for feature in self.features:
            feature.failures_changed(records)

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
        for feature in self.features:
            await feature.settings_changed(old)


def create_server() -> AotiLanguageServer:
    ls = AotiLanguageServer()

    @ls.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        ls.settings, problems = Settings().merged(params.initialization_options)
        for problem in problems:
            ls.log(problem, types.MessageType.Warning)

    @ls.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        for feature in ls.features:
            await feature.initialized()

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        await ls.apply_settings(params.settings)

    @ls.feature(types.SHUTDOWN)
    async def shutdown(params: None) -> None:
        ls.shutting_down = True
        for feature in ls.features:
            await feature.shutdown()

    @ls.feature(types.EXIT)
    def exit_(params: None) -> None:
        for feature in ls.features:
            feature.exit()

    for feature in ls.features:
        feature.register()
    return ls
