"""Virtual documents (`workspace/textDocumentContent`, scheme `aoti`): the shrinking graph, the
original graph, the failing kernel's source, and the shrink picture (server/shrink.py).

The kernel document is the kernel file verbatim, without a header, so its line numbers are the
compiler's and the hover on the error line works there as in the real file.

The graph document and the shrink picture are refreshed whenever what they show changes (a new
smallest graph, and the end of the job too, whose state the graph's header shows), once per flush
however many events came in that turn, whoever's run it is (the server's jobs, a terminal's run
followed through its events log, files on disk). A refresh the client fails to take is sent again at
the next change, or after a short delay: one transient error must not freeze the live graph for the
rest of the session.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcMethodNotFound

from .feature import Feature
from .protocol import graph_uri, parse_uri, shrink_uri
from .shrink import markdown

if TYPE_CHECKING:
    from .failures import FailureRecord
    from .server import AotiLanguageServer

RETRY_SECONDS = 2.0
_UNSENT = object()  # the version of a document whose last refresh failed: never equal to a real one


def graph_version(record: FailureRecord) -> tuple[Any, ...]:
    """What the graph document and the shrink picture show, short of the counters (queries, seconds)
    that every candidate moves: a change in any of it is worth a refresh. Cheap: unchanged fields
    compare by identity."""
    return (
        record.state,
        tuple(record.history),
        record.graph,
        record.original,
        record.failure,
        record.signature,
        record.repro,
    )


class Documents(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self._versions: dict[str, object] = {}  # failure id -> the version the client last heard of
        self._failed_refreshes = 0  # in a row; a success resets it
        self._unsupported = False  # the client answered "method not found"
        self._retry: asyncio.TimerHandle | None = None

    def register(self) -> None:
        @self.ls.feature(types.WORKSPACE_TEXT_DOCUMENT_CONTENT)
        def content(params: types.TextDocumentContentParams) -> types.TextDocumentContentResult:
            return types.TextDocumentContentResult(text=render(self.ls, params.uri))

    @property
    def supported(self) -> bool:
        """The client can open `aoti:` documents (LSP 3.18); other editors get real files or text instead."""
        workspace = self.ls.client_capabilities.workspace
        return bool(workspace and workspace.text_document_content is not None)

    def failures_changed(self, records: list[FailureRecord]) -> None:
        if not self.supported or self._unsupported or self.ls.shutting_down:
            return
        versions = {r.id: graph_version(r) for r in records}
        for failure_id, version in versions.items():
            # A failure seen for the first time has nothing on screen to refresh yet.
            if self._versions.setdefault(failure_id, version) != version:
                self._versions[failure_id] = version
                for uri in (graph_uri(failure_id), shrink_uri(failure_id)):
                    self.refresh(failure_id, uri)
        for gone in self._versions.keys() - versions.keys():
            del self._versions[gone]

    def refresh(self, failure_id: str, uri: str) -> None:
        """Have the client ask again for a document whose content changed."""
        future = self.ls.workspace_text_document_content_refresh(types.TextDocumentContentRefreshParams(uri=uri))
        future.add_done_callback(lambda f: self._refreshed(failure_id, uri, f))

    def _refreshed(self, failure_id: str, uri: str, future: Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            if self._failed_refreshes:
                self.ls.log(
                    f"workspace/textDocumentContent/refresh works again after {self._failed_refreshes} "
                    "failed request(s)"
                )
            self._failed_refreshes = 0
            return
        if isinstance(error, JsonRpcMethodNotFound):
            self._unsupported = True
            self.ls.log(
                f"the client does not implement workspace/textDocumentContent/refresh ({error}); "
                "reopen aoti: documents to see updates",
                types.MessageType.Warning,
            )
            return
        self._failed_refreshes += 1
        if self._failed_refreshes == 1:
            self.ls.log(
                f"the client failed a workspace/textDocumentContent/refresh of {uri} ({error}); it is sent again",
                types.MessageType.Warning,
            )
        if failure_id in self._versions:
            self._versions[failure_id] = _UNSENT
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_SECONDS, self._resend)

    async def shutdown(self) -> None:
        if self._retry is not None:
            self._retry.cancel()

    def _resend(self) -> None:
        self._retry = None
        self.failures_changed(self.ls.failures.records())


def render(ls: AotiLanguageServer, uri: str) -> str:
    doc = parse_uri(uri)
    record = ls.failures.get(doc.failure_id) if doc else None
    if doc is None or record is None:
        return f"# {uri}: no such aoti-lens document (was its debug folder deleted?)\n"
    if doc.kind == "graph":
        graph = record.current_graph() or "# no graph yet: reproduce or minify the failure"
        return f"{record.graph_header()}\n{graph}\n"
    if doc.kind == "shrink":
        return markdown(record)
    if doc.kind == "original":
        graph = record.original_graph() or "# the original graph is known once the failure is reproduced"
        nodes = record.nodes_at_start or "?"
        return f"# original graph of {record.id}: {nodes} nodes\n\n{graph}\n"
    if doc.kernel == record.kernel_name and record.failure and record.failure.kernel_source:
        return record.failure.kernel_source
    return f"# {record.id} has no kernel named {doc.kernel}\n"
