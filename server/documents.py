"""Virtual documents (`workspace/textDocumentContent`, scheme `aoti`): the shrinking graph, the
original graph, the failing kernel's source, and the shrink picture (server/shrink.py).

The kernel document is the kernel file verbatim, without a header, so its line numbers are the
compiler's and the hover on the error line works there as in the real file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .feature import Feature
from .protocol import parse_uri
from .shrink import markdown

if TYPE_CHECKING:
    from .server import AotiLanguageServer


class Documents(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self._refresh_broken = False

    def register(self) -> None:
        @self.ls.feature(types.WORKSPACE_TEXT_DOCUMENT_CONTENT)
        def content(params: types.TextDocumentContentParams) -> types.TextDocumentContentResult:
            return types.TextDocumentContentResult(text=render(self.ls, params.uri))

    @property
    def supported(self) -> bool:
        """The client can open `aoti:` documents (LSP 3.18); other editors get real files or text instead."""
        workspace = self.ls.client_capabilities.workspace
        return bool(workspace and workspace.text_document_content is not None)

    @property
    def supports_refresh(self) -> bool:
        return self.supported and not self._refresh_broken

    def refresh(self, uri: str) -> None:
        """Have the client ask again for a document whose content changed."""
        if not self.supports_refresh:
            return
        future = self.ls.workspace_text_document_content_refresh(types.TextDocumentContentRefreshParams(uri=uri))

        def done(f: Any) -> None:
            if not f.cancelled() and f.exception() is not None and not self._refresh_broken:
                self._refresh_broken = True
                self.ls.log(f"the client rejected workspace/textDocumentContent/refresh ({f.exception()}); "
                            "reopen aoti: documents to see updates", types.MessageType.Warning)

        future.add_done_callback(done)


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
