"""Code actions on aoti-lens diagnostics, and the `aoti.*` commands they (and the client) run.

Minify and reproduce execute the workspace's launcher, so they do nothing in an untrusted
workspace except say why. One job per failure: minifying a failure that is already being
minified shows its shrinking graph instead of starting another job.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from minifier.contract.lock import holder as lock_holder

from .capture import capture_actions
from .diagnostics import SOURCE
from .failures import FailureRecord, uri_of
from .feature import Feature, handler
from .jobs import KINDS, JobKind, Jobs, Working
from .live import stop
from .protocol import (
    CANCEL,
    MINIFY,
    OPEN_REPRO,
    REPORT,
    REPRODUCE,
    SHOW_GRAPH,
    SHOW_KERNEL,
    SHOW_SHRINK,
    TRIAGE,
    UNTRUSTED,
    VERSIONS,
    graph_uri,
    kernel_uri,
    shrink_uri,
)
from .shrink import text_curve
from .workarounds import CODE as WORKAROUND

if TYPE_CHECKING:
    from .server import AotiLanguageServer


def available(record: FailureRecord, working: Working | None) -> list[tuple[str, str]]:
    """(title, command) pairs that make sense for this failure now, the most useful first."""
    if not record.usable:
        return []
    if working is None:
        actions = [("Minify this failure", MINIFY), ("Reproduce failure", REPRODUCE)]
        actions.append(("Find a workaround", TRIAGE))
        if record.repro:
            actions[:0] = [("Open repro.py", OPEN_REPRO), ("Prepare a PyTorch bug report", REPORT)]
            actions.append(("Check other torch releases", VERSIONS))
        if record.history:
            actions += [("Show shrinking graph", SHOW_GRAPH), ("Show the shrink curve", SHOW_SHRINK)]
    elif working.job is None:
        actions = [("Show shrinking graph", SHOW_GRAPH), (f"Stop aoti-minify (pid {working.pid})", CANCEL)]
    elif working.job.kind in ("minify", "triage"):
        actions = [("Show shrinking graph", SHOW_GRAPH), (KINDS[working.job.kind].cancel, CANCEL)]
    else:
        actions = [("Minify this failure", MINIFY), (KINDS[working.job.kind].cancel, CANCEL)]
    if record.kernel_name:
        actions.append(("Show failing kernel", SHOW_KERNEL))
    return actions


class Actions(Feature):
    def __init__(self, ls: AotiLanguageServer, jobs: Jobs) -> None:
        super().__init__(ls)
        self.jobs = jobs  # who works on each failure: the jobs feature's, handed in at setup

    def register(self) -> None:
        ls = self.ls
        ls.feature(
            types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])
        )(handler(self.code_actions))
        ls.command(MINIFY)(handler(self.minify))
        ls.command(REPRODUCE)(handler(self.reproduce))
        ls.command(CANCEL)(handler(self.cancel))
        ls.command(REPORT)(handler(self.report))
        ls.command(TRIAGE)(handler(self.triage))
        ls.command(VERSIONS)(handler(self.versions))
        ls.command(SHOW_SHRINK)(handler(self.show_shrink))
        ls.command(OPEN_REPRO)(handler(self.open_repro))
        ls.command(SHOW_GRAPH)(handler(self.show_graph))
        ls.command(SHOW_KERNEL)(handler(self.show_kernel))

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        ls = self.ls
        actions: list[types.CodeAction] = []
        seen: set[str] = set()
        for diagnostic in params.context.diagnostics:
            if diagnostic.code == WORKAROUND:  # on the user's own call: only the edit it offers
                continue
            failure_id = _failure_id(diagnostic)
            record = ls.failures.get(failure_id) if failure_id and failure_id not in seen else None
            if record is None:
                continue
            seen.add(record.id)
            for i, (title, command) in enumerate(available(record, self.jobs.working_on(record))):
                actions.append(
                    types.CodeAction(
                        title=title,
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[diagnostic],
                        is_preferred=i == 0,
                        command=types.Command(title=title, command=command, arguments=[record.id]),
                    )
                )
        return actions + ls.workarounds.quick_fixes(params) + capture_actions(ls, params)

    async def minify(self, failure_id: str) -> None:
        ls = self.ls
        record = _lookup(ls, failure_id)
        if record is None:
            return
        job = self.jobs.running(record.id)
        if job is None and (other := await self._minified_elsewhere(record)) is not None:
            hint = " (Cancel stops it as Ctrl-C would)" if record.external is not None else ""
            ls.tell(
                f"{record.id}: {other}, started outside the editor, is minifying it: following it{hint}",
                types.MessageType.Info,
            )
            await ls.show(graph_uri(record.id), "the shrinking graph")
            return
        if job is None or job.kind != "minify":
            if not _allowed(ls, record):
                return
            if job is not None:  # a reproduction; minify re-checks the failure itself
                await self.jobs.stop(record.id, "minification requested")
            if self.jobs.running(record.id) is None:  # else another request started it meanwhile
                self.jobs.start(record, "minify", user=True)
                return
        await ls.show(graph_uri(record.id), "the shrinking graph")

    async def reproduce(self, failure_id: str) -> None:
        ls = self.ls
        record = _lookup(ls, failure_id)
        if record is None or not _allowed(ls, record):
            return
        if (working := self.jobs.working_on(record)) is not None:
            ls.tell(f"{record.id} is being worked on ({working.describe()})", types.MessageType.Info)
            return
        self.jobs.start(record, "run", user=True)

    async def triage(self, failure_id: str) -> None:
        """Minify first when there is no repro.py yet, then look for a workaround (`aoti-minify triage`)."""
        ls = self.ls
        record = _lookup(ls, failure_id)
        if record is None or not _allowed(ls, record):
            return
        job = self.jobs.running(record.id)
        if job is not None and job.kind == "minify" and record.state == "minimized" and job.task is not None:
            # its `done` came: only the standalone repro's check is left, seconds
            ls.tell(f"{record.id}: the workaround search starts once repro_standalone.py is checked")
            await asyncio.wait({job.task})
            job = self.jobs.running(record.id)
        if job is not None and job.kind in ("minify", "triage"):
            ls.tell(f"{record.id} is being worked on ({job.kind}); find a workaround when it has ended")
            return
        if job is not None:  # a reproduction; triage re-checks the failure itself
            await self.jobs.stop(record.id, "a workaround search requested")
        if self.jobs.running(record.id) is None:
            self.jobs.start(record, "triage", user=True)

    async def _minified_elsewhere(self, record: FailureRecord) -> str | None:
        """The minify or triage a terminal runs on this dump, followed from now on; None if there is none. The
        dump's lock names it before the events log does (the log is read every half second)."""
        ls = self.ls
        if record.external is None and (holder := lock_holder(record.layout.lock)) is not None:
            if holder.command not in ("minify", "triage") or holder.pid in self.jobs.pids:
                return None
            await ls.live.follow([record])
            if record.external is None:  # no events log of it (yet): the lock is all there is to name it
                return holder.describe()
        if record.external is None or record.external.command not in ("minify", "triage"):
            return None
        return f"aoti-minify {record.external.command} (pid {record.external.pid})"

    def cancel(self, failure_id: str) -> None:
        ls = self.ls
        record = _lookup(ls, failure_id)
        if record is None or self.jobs.cancel(record.id, "cancelled by the user"):
            return
        if record.external is None:
            ls.tell(f"nothing is running for {record.id}", types.MessageType.Info)
        elif not ls.settings.trusted:  # a signal to another program is an action on the workspace too
            ls.tell(UNTRUSTED)
        elif stop(record.external):
            other = f"aoti-minify {record.external.command} (pid {record.external.pid})"
            ls.log(f"{record.id}: sent SIGINT to {other} started outside the editor")
            ls.tell(
                f"{record.id}: stopped {other}, started outside the editor, as Ctrl-C would: "
                "it keeps its best checkpoint as repro.py",
                types.MessageType.Info,
            )
        else:
            ls.tell(f"{record.id}: aoti-minify (pid {record.external.pid}) could not be stopped from here")

    def versions(self, failure_id: str) -> None:
        record = _lookup(self.ls, failure_id)
        if record is not None and _allowed(self.ls, record):  # it runs the repro: workspace code
            self._beside(record, "versions", "check other releases")

    def report(self, failure_id: str) -> None:
        record = _lookup(self.ls, failure_id)
        if record is not None:  # runs no workspace code: the report only reads the dump and asks torch its versions
            self._beside(record, "report", "prepare the report")

    def _beside(self, record: FailureRecord, kind: JobKind, what: str) -> None:
        """A job on the minimal repro beside the failure's state, once nothing else works on it."""
        ls = self.ls
        if not record.repro:
            ls.tell(f"{record.id} has no repro.py yet: minify it first", types.MessageType.Info)
        elif (working := self.jobs.working_on(record)) is not None:
            ls.tell(
                f"{record.id} is being worked on ({working.describe()}); {what} when that has ended",
                types.MessageType.Info,
            )
        else:
            self.jobs.start(record, kind, user=True)

    async def show_shrink(self, failure_id: str) -> None:
        ls = self.ls
        if (record := _lookup(ls, failure_id)) is None:
            return
        if ls.documents.supported:
            await ls.show(shrink_uri(record.id), "the shrink curve")
        else:
            curve = text_curve(record.history) if record.history else "no minification yet"
            ls.tell(f"{record.id} shrank: {curve}", types.MessageType.Info)

    async def open_repro(self, failure_id: str) -> None:
        ls = self.ls
        record = _lookup(ls, failure_id)
        if record is not None and record.repro:
            await ls.show(uri_of(record.repro), "repro.py")
        elif record is not None:
            ls.tell(f"{record.id} has no repro.py yet: minify it first", types.MessageType.Info)

    async def show_graph(self, failure_id: str) -> None:
        ls = self.ls
        if (record := _lookup(ls, failure_id)) is None:
            return
        if ls.documents.supported:
            await ls.show(graph_uri(record.id), "the shrinking graph")
        elif (path := _graph_file(record)) is not None:  # the same graph, as a file an editor can open
            await ls.show(uri_of(path), "the smallest failing graph")
        else:
            ls.tell(f"{record.id} has no smaller graph yet: minify it first", types.MessageType.Info)

    async def show_kernel(self, failure_id: str) -> None:
        ls = self.ls
        record = _lookup(ls, failure_id)
        if record is not None and record.kernel_name:
            await ls.show(kernel_uri(record.id, record.kernel_name), "the failing kernel")
        elif record is not None:
            ls.tell(f"no kernel source is known for {record.id}: reproduce it first", types.MessageType.Info)


def _graph_file(record: FailureRecord) -> str | None:
    if record.repro:
        return record.repro
    path = record.layout.checkpoint_py(record.nodes_now) if record.nodes_now else None
    return path if path and os.path.isfile(path) else None


def _failure_id(diagnostic: types.Diagnostic) -> str | None:
    data: Any = diagnostic.data
    if diagnostic.source != SOURCE or not isinstance(data, dict):
        return None
    failure_id = data.get("failureId")
    return failure_id if isinstance(failure_id, str) else None


def _lookup(ls: AotiLanguageServer, failure_id: str) -> FailureRecord | None:
    record = ls.failures.get(failure_id)
    if record is None:
        ls.tell(f"aoti-lens knows no failure {failure_id!r} (was its debug folder deleted?)")
    return record


def _allowed(ls: AotiLanguageServer, record: FailureRecord) -> bool:
    if not ls.settings.trusted:
        ls.tell(UNTRUSTED)
        return False
    if not record.usable:
        ls.tell(f"aoti-lens cannot use the launcher of {record.id}: {record.problem}", types.MessageType.Error)
        return False
    if record.external is not None:
        ls.tell(
            f"{record.id} is being worked on by aoti-minify {record.external.command} (pid "
            f"{record.external.pid}), started outside the editor: stop it first",
            types.MessageType.Info,
        )
        return False
    return True
