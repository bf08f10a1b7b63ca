"""Hover on a failing line (the kernel's error line, real file or `aoti:` document, and the
launcher's run_repro line): the error, the kernel, its source nodes and ATen ops, links to the
model's own lines, and where minification stands."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.uris import to_fs_path

from .failures import FailureRecord, uri_of
from .feature import Feature
from .protocol import parse_uri

if TYPE_CHECKING:
    from .server import AotiLanguageServer


class Hover(Feature):
    def register(self) -> None:
        @self.ls.feature(types.TEXT_DOCUMENT_HOVER)
        def hover(params: types.HoverParams) -> types.Hover | None:
            line = params.position.line
            record = failing_line(self.ls, params.text_document.uri, line)
            if record is None:
                return None
            return types.Hover(
                contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=describe(record)),
                range=types.Range(
                    start=types.Position(line=line, character=0), end=types.Position(line=line + 1, character=0)
                ),
            )


def failing_line(ls: AotiLanguageServer, uri: str, line: int) -> FailureRecord | None:
    doc = parse_uri(uri)
    if doc is not None:
        record = ls.failures.get(doc.failure_id)
        hit = record and doc.kind == "kernel" and doc.kernel == record.kernel_name and _kernel_line(record) == line
        return record if hit else None
    path = to_fs_path(uri)
    path = os.path.abspath(path) if path else None
    for record in ls.failures.records():
        kernel = record.kernel
        if kernel and kernel.file and os.path.abspath(kernel.file) == path and _kernel_line(record) == line:
            return record
        if record.launcher == path and record.spec and record.spec.run_repro_line == line:
            return record
    return None


def _kernel_line(record: FailureRecord) -> int | None:
    kernel = record.kernel
    return kernel.line - 1 if kernel and kernel.line else None


def describe(record: FailureRecord) -> str:
    signature = record.signature
    noun = record.noun
    parts = [f"**{noun}** `{signature.describe()}`" if signature else f"**{noun}** (not reproduced yet)"]
    failure = record.failure
    if failure and failure.headline:
        parts.append(f"```text\n{failure.headline}\n```")
    facts = []
    kernel = record.kernel
    if kernel:
        where = f" at `{os.path.basename(kernel.file)}:{kernel.line}`" if kernel.file and kernel.line else ""
        facts.append(f"- **kernel** `{kernel.name or '?'}`{where}")
        if kernel.source_nodes:
            facts.append(f"- **source nodes** {', '.join(f'`{n}`' for n in kernel.source_nodes)}")
        if kernel.aten_ops:
            facts.append(f"- **ATen ops** {', '.join(f'`{op}`' for op in kernel.aten_ops)}")
    for source in record.model_lines():
        link = f"[{os.path.basename(source.file)}:{source.line}]({uri_of(source.file)}#L{source.line})"
        code = f": `{source.code}`" if source.code else ""
        facts.append(f"- **model** {link} ({', '.join(source.nodes)}){code}")
    if record.triage:
        culprit = record.triage.culprit
        facts.append(
            f"- **culprit** {culprit.subsystem} ({culprit.phase}): {', '.join(f'`{op}`' for op in culprit.ops)}"
        )
        for workaround in record.triage.workarounds:
            facts.append(f"- **workaround** `{workaround.describe(record.call)}` (verified on the original)")
        if not record.triage.workarounds:
            facts.append(f"- **workaround** none among {record.triage.tried} config changes tried")
    facts.append(f"- **state** {record.state}{f': {record.message}' if record.message else ''}")
    facts.append(f"- **failure** `{record.id}`")
    parts.append("\n".join(facts))
    return "\n\n".join(parts)
