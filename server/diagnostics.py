"""Diagnostics, computed from the failure records alone; only the difference is published.

Per failure: one on the launcher's `run_repro` line (or line 0 when the launcher is unusable), one
on the failing kernel line with relatedInformation to the model's own source lines and the
launcher, one on each lying fake kernel that is defined in the workspace (`aoti-minify run` found it), and one
on repro.py once there is one. `data` carries the failure id for code actions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from lsprotocol import types

from .failures import FailureRecord, uri_of
from .feature import Feature
from .protocol import RUNNING_STATES

if TYPE_CHECKING:
    from .server import AotiLanguageServer

SOURCE = "aoti-lens"


class Diagnostics(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self._published: dict[str, list[types.Diagnostic]] = {}

    def failures_changed(self, records: list[FailureRecord]) -> None:
        current = collect(records, self.ls.folders())
        for uri, diagnostic in self.ls.workarounds.diagnostics(records):
            current.setdefault(uri, []).append(diagnostic)
        for uri in sorted(set(current) | set(self._published)):
            if current.get(uri, []) != self._published.get(uri, []):
                self.ls.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=uri, diagnostics=current.get(uri, []))
                )
        self._published = current


def collect(records: Iterable[FailureRecord], workspace: list[str]) -> dict[str, list[types.Diagnostic]]:
    out: dict[str, list[types.Diagnostic]] = {}
    for record in records:
        for uri, diagnostic in [*for_record(record), *_fake_kernels(record, workspace)]:
            out.setdefault(uri, []).append(diagnostic)
    return out


def for_record(record: FailureRecord) -> Iterator[tuple[str, types.Diagnostic]]:
    data = {"failureId": record.id}
    if not record.usable or record.spec is None:
        yield (
            uri_of(record.launcher),
            types.Diagnostic(
                range=_line(0),
                severity=types.DiagnosticSeverity.Error,
                source=SOURCE,
                code="bad_launcher",
                message=f"aoti-lens cannot use this launcher: {record.problem}",
                data=data,
            ),
        )
        return
    related = [*_model_lines(record), *_kernel_location(record)]
    yield (
        uri_of(record.launcher),
        types.Diagnostic(
            range=_line(record.spec.run_repro_line),
            severity=_launcher_severity(record),
            source=SOURCE,
            code=record.signature.kind if record.signature else None,
            message=_launcher_message(record),
            related_information=related or None,
            data=data,
        ),
    )
    kernel = record.kernel
    if kernel and kernel.file and kernel.line and os.path.isfile(kernel.file):
        launcher = types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri_of(record.launcher), range=_line(record.spec.run_repro_line)),
            message=f"minifier launcher of {record.noun} {record.id} (minify it from here)",
        )
        column = max(0, (kernel.column or 1) - 1)
        yield (
            uri_of(kernel.file),
            types.Diagnostic(
                range=types.Range(
                    start=types.Position(line=kernel.line - 1, character=column),
                    end=types.Position(line=kernel.line, character=0),
                ),
                severity=types.DiagnosticSeverity.Error,
                source=SOURCE,
                code=record.signature.kind if record.signature else None,
                message=f"{_headline(record)} (kernel {kernel.name or '?'}, {record.noun} {record.id})",
                related_information=[*_model_lines(record), launcher],
                data=data,
            ),
        )
    if record.repro and record.state in ("minimized", "cancelled"):
        yield (
            uri_of(record.repro),
            types.Diagnostic(
                range=_line(0),
                severity=types.DiagnosticSeverity.Information,
                source=SOURCE,
                code="repro",
                message=_repro_message(record),
                data=data,
            ),
        )


def _fake_kernels(record: FailureRecord, workspace: list[str]) -> Iterator[tuple[str, types.Diagnostic]]:
    """A custom op's fake kernel that tells export other sizes than the op returns, at its definition: compiled
    code trusts it whatever Inductor does, so that is where the fix goes."""
    if record.failure is None or record.spec is None:
        return
    launcher = types.DiagnosticRelatedInformation(
        location=types.Location(uri=uri_of(record.launcher), range=_line(record.spec.run_repro_line)),
        message=f"minifier launcher of {record.noun} {record.id}",
    )
    for lie in record.failure.fake_kernels:
        if not (lie.file and lie.line and os.path.isfile(lie.file) and _inside(lie.file, workspace)):
            continue
        yield (
            uri_of(lie.file),
            types.Diagnostic(
                range=_line(lie.line - 1),
                severity=types.DiagnosticSeverity.Warning,
                source=SOURCE,
                code="fake_kernel",
                message=f"the fake kernel of {lie.op} gives {lie.fake}, the op returns {lie.real} (node {lie.node}): "
                f"compiled code trusts the fake kernel ({record.noun} {record.id})",
                related_information=[launcher],
                data={"failureId": record.id},
            ),
        )


def _inside(path: str, folders: list[str]) -> bool:
    path = os.path.realpath(path)
    return any(os.path.commonpath([path, os.path.realpath(folder)]) == os.path.realpath(folder) for folder in folders)


def _launcher_severity(record: FailureRecord) -> types.DiagnosticSeverity:
    if record.signature is not None:
        return types.DiagnosticSeverity.Error
    if record.state in RUNNING_STATES:
        return types.DiagnosticSeverity.Information
    return types.DiagnosticSeverity.Warning


def _launcher_message(record: FailureRecord) -> str:
    state = {
        "found": "reproduce or minify it",
        "reproducing": "reproducing it in the background",
        "reproduced": "minify it to get a minimal repro",
        "minifying": f"minifying: {record.nodes_line()}",
        "minimized": record.message or f"minimized: {record.progress_line()}",
        "cancelled": f"cancelled: {record.message}",
        "error": f"aoti-minify failed: {record.message}",
    }[record.state]
    if record.signature is None:
        return f"{record.noun} dumped here; {state}"
    return f"{record.noun}: {record.signature.describe()} ({state})"


def _headline(record: FailureRecord) -> str:
    if record.failure and record.failure.headline:
        return record.failure.headline
    return record.signature.describe() if record.signature else record.noun


def _repro_message(record: FailureRecord) -> str:
    nodes = f"{record.nodes_now} node{'s' if record.nodes_now != 1 else ''}" if record.nodes_now else "? nodes"
    reproduces = record.signature.describe() if record.signature else "the original failure"
    if record.state == "cancelled":
        return f"partial repro (minification cancelled): {nodes}, reproduces {reproduces}"
    releases = f"; torch releases: {record.releases}" if record.releases else ""
    return f"minimal repro: {nodes}, reproduces {reproduces}{releases}"


def _model_lines(record: FailureRecord) -> list[types.DiagnosticRelatedInformation]:
    return [
        types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri_of(source.file), range=_line(source.line - 1)),
            message=f"model code of {', '.join(source.nodes)}: {source.code}",
        )
        for source in record.model_lines()
    ]


def _kernel_location(record: FailureRecord) -> list[types.DiagnosticRelatedInformation]:
    kernel = record.kernel
    if not (kernel and kernel.file and kernel.line and os.path.isfile(kernel.file)):
        return []
    return [
        types.DiagnosticRelatedInformation(
            location=types.Location(uri=uri_of(kernel.file), range=_line(kernel.line - 1)),
            message=f"failing kernel {kernel.name or ''}".rstrip(),
        )
    ]


def _line(number: int) -> types.Range:
    return types.Range(
        start=types.Position(line=max(0, number), character=0), end=types.Position(line=max(0, number) + 1, character=0)
    )
