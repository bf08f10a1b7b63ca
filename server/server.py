"""The aoti-lens language server object: settings, known failures, and the features.

All mutable state hangs off this one object. Each feature (server/feature.py: discovery, jobs,
documents, hover, actions, diagnostics, the failure list) registers its own handlers and follows the
server's life through hooks that the lifecycle handlers here call on all of them in turn. Publishing
is batched: any change marks the server dirty, and one flush per event loop turn has every feature
publish what it shows of the failures (one `aoti/failuresChanged`, then the diagnostics that changed).
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Generator
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.uris import to_fs_path

from . import __version__
from .actions import Actions
from .capture import Capture
from .configuration import Configuration, folder_of
from .diagnostics import Diagnostics
from .discovery import Discovery
from .documents import Documents
from .failure_list import FailureList
from .failures import FailureStore
from .feature import Feature
from .hover import Hover
from .jobs import Jobs
from .live import LiveRuns
from .protocol import PROTOCOL_VERSION, SCHEME, Settings, client_protocol, experimental_capabilities
from .workarounds import Workarounds


class AotiProtocol(LanguageServerProtocol):
    """Advertises `workspace.textDocumentContent`, which pygls 2.1.1 handles but does not announce, and
    answers the version handshake: the client's protocol version in, the server's and its package's out."""

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        server = self._server
        assert isinstance(server, AotiLanguageServer)
        server.client_protocol = client_protocol(params.capabilities.experimental)
        result = yield from super().lsp_initialize(params)
        workspace = result.capabilities.workspace or types.WorkspaceOptions()
        workspace.text_document_content = types.TextDocumentContentOptions(schemes=[SCHEME])
        result.capabilities.workspace = workspace
        result.capabilities.experimental = experimental_capabilities(server.client_protocol)
        return result


class AotiLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "aoti-lsp", __version__, protocol_cls=AotiProtocol, text_document_sync_kind=types.TextDocumentSyncKind.None_
        )
        self.settings = Settings()  # the window's; a folder's own are in folder_settings
        self.folder_settings: dict[str, Settings] = {}
        self.client_protocol: int | None = None  # None: not an aoti-lens client (another editor)
        self.failures = FailureStore()
        self.configuration = Configuration(self)
        self.jobs = Jobs(self)
        self.discovery = Discovery(self, self.jobs)
        self.documents = Documents(self)
        self.live = LiveRuns(self, self.jobs)
        self.workarounds = Workarounds(self)
        # Hooks run in this order: settings are pulled before discovery scans; on a settings change,
        # jobs stop before discovery starts new ones.
        self.features: list[Feature] = [
            self.configuration,
            self.jobs,
            self.discovery,
            self.live,
            self.documents,
            Hover(self),
            Actions(self, self.jobs),
            Capture(self),
            self.workarounds,  # before the diagnostics, which publish its own
            # before the diagnostics: a diagnostic names its failure by id, and a client that has one (a quick
            # fix, a test) must find that failure in the list it already has
            FailureList(self),
            Diagnostics(self),
        ]
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
    def aoti_client(self) -> bool:
        """The client announced the aoti-lens protocol: it understands the custom methods."""
        return self.client_protocol is not None

    @property
    def supports_show_document(self) -> bool:
        window = self.client_capabilities.window
        return bool(window and window.show_document and window.show_document.support)

    def folders(self) -> list[str]:
        folders = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
        return [os.path.abspath(f) for f in folders if f] or (
            [os.path.abspath(self.workspace.root_path)] if self.workspace.root_path else []
        )

    def settings_for(self, path: str) -> Settings:
        """The settings of the workspace folder holding `path`, else the window's."""
        folder = folder_of(list(self.folder_settings), path)
        return self.folder_settings[folder] if folder is not None else self.settings

    def debug_roots(self) -> list[str]:
        """debugDirRoots: the window's relative to the first workspace folder, a folder's relative to it."""
        base = next(iter(self.folders()), os.getcwd())
        pairs = [(base, self.settings), *self.folder_settings.items()]
        roots = [
            os.path.abspath(os.path.join(folder, os.path.expanduser(r)))
            for folder, settings in pairs
            for r in settings.debug_dir_roots
        ]
        return list(dict.fromkeys(roots))

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

    async def settings_changed(self, old: Settings) -> None:
        for feature in self.features:
            await feature.settings_changed(old)


def create_server() -> AotiLanguageServer:
    ls = AotiLanguageServer()

    @ls.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        if ls.client_protocol not in (None, PROTOCOL_VERSION):
            ls.log(
                f"the client speaks aoti-lens protocol {ls.client_protocol}, this server ({__version__}) "
                f"{PROTOCOL_VERSION}: update one of them",
                types.MessageType.Warning,
            )
        for feature in ls.features:
            await feature.initialized()

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
