"""Runs this server did not start: an `aoti-minify run`, `minify` or `capture` in a terminal, on a
dump in the workspace, shown while it runs.

Every run appends its events to the dump's events log (DumpLayout.events_log) after a `begin` event
that names its process. This feature tails the log of every known failure (a stat per failure and
poll; no network port), and while the run there is alive folds its events into the failure just as
a job's own events are: progress in the view, the live graph document, then repro.py's diagnostic.
Events of the server's own jobs arrive on their stdout and are skipped here. A failure's log read
for the first time also gives back the shrink curve of its last minification.

It also looks for new and removed run folders in the debug folders it knows: on every poll for a
client that reports no file events, and every few seconds for one that does, because file watchers
miss files: VS Code's missed a capture's snapshot (a run folder copied in one go, its files written
before the watch on the new folder was in place), and watchers on network file systems or past the
inotify limit see nothing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from typing import TYPE_CHECKING

from lsprotocol import types

from minifier.contract.events import BeginEvent, Event, EventsTail, TailRead, ends, last_run
from minifier.contract.layout import DEBUG_DIR, launchers_in
from minifier.contract.procs import alive

from .failures import FailureRecord
from .feature import Feature
from .protocol import RUNNING_STATES, State

if TYPE_CHECKING:
    from .jobs import Jobs
    from .server import AotiLanguageServer

POLL_SECONDS = 0.5
LOOK_SECONDS = 3.0  # between looks for run folders that file events did not report
# What a command started outside the editor does to a failure: the state it shows, and how it is told
COMMANDS: dict[str, tuple[State, str]] = {
    "run": ("reproducing", "reproducing it"),
    "capture": ("reproducing", "captured it; it reproduces it when the program ends"),
    "minify": ("minifying", "minifying it"),
    "triage": ("minifying", "looking for a workaround"),
}


def running(begin: BeginEvent) -> bool:
    """Whether the process that wrote `begin` still runs (pid reuse aside: it must be a Python)."""
    if begin.host != socket.gethostname():
        return True  # another machine's process: only its events can say it ended
    try:
        with open(f"/proc/{begin.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        return b"minifier" in cmdline or b"aoti-minify" in cmdline
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here
        return alive(begin.pid)


def stop(begin: BeginEvent) -> bool:
    """Ask a run started elsewhere to stop, as Ctrl-C would (it keeps its best checkpoint as repro.py)."""
    if begin.host != socket.gethostname() or not running(begin):
        return False
    try:
        os.kill(begin.pid, signal.SIGINT)
    except OSError:
        return False
    return True


class LiveRuns(Feature):
    def __init__(self, ls: AotiLanguageServer, jobs: Jobs) -> None:
        super().__init__(ls)
        self.jobs = jobs  # the editor's own runs, which are not followed from outside
        self._tails: dict[str, EventsTail] = {}  # by failure id
        self._lock = asyncio.Lock()  # one read of the logs at a time (they run in the executor)
        self._task: asyncio.Task[None] | None = None
        # the loop keeps only weak references to tasks: one nobody holds may be collected before it ends
        self._refreshes: set[asyncio.Task[None]] = set()
        self._next_look = 0.0

    async def initialized(self) -> None:
        self._task = asyncio.create_task(self._poll_forever())

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def forget(self, failure_id: str) -> None:
        self._tails.pop(failure_id, None)

    async def follow(self, records: list[FailureRecord]) -> None:
        """Take in what is new in these failures' logs (for a failure new to the server: all of it)."""
        async with self._lock:
            pairs = [(r.id, r.layout.events_log) for r in records]
            fresh = {r.id for r in records if r.id not in self._tails}
            reads = await asyncio.get_running_loop().run_in_executor(None, self._read, pairs)
        for record, read in zip(records, reads):
            if read is not None and self.ls.failures.get(record.id) is record:
                self._take(record, read, first=record.id in fresh)

    def _read(self, pairs: list[tuple[str, str]]) -> list[TailRead | None]:
        reads: list[TailRead | None] = []
        for failure_id, path in pairs:
            tail = self._tails.get(failure_id)
            if tail is None or tail.path != path:
                tail = self._tails[failure_id] = EventsTail(path)
            try:
                stat = os.stat(path)
                unchanged = (stat.st_ino, stat.st_size) == (tail.inode, tail.offset)
            except OSError:
                unchanged = tail.inode is None
            reads.append(None if unchanged else tail.read())
        return reads

    def _take(self, record: FailureRecord, read: TailRead, first: bool) -> None:
        for problem in read.problems[:3]:
            self.ls.log(
                f"{record.id}: ignored a line of {record.layout.events_log}: {problem}", types.MessageType.Warning
            )
        events = read.events
        if first:
            events = last_run(events)
            begin = events[0] if events and isinstance(events[0], BeginEvent) else None
            if begin is None or begin.pid in self.jobs.pids or not running(begin):
                self._recall_shrink(record, events)
                return
            events = events[1:]
            self._begin(record, begin)
        for event in events:
            self._on_event(record, event)

    def _on_event(self, record: FailureRecord, event: Event) -> None:
        ls = self.ls
        if isinstance(event, BeginEvent):
            if event.pid in self.jobs.pids or event.command not in COMMANDS:
                return  # the server's own job: its events come on its stdout
            self._begin(record, event)
            return
        if record.external is None:
            return
        if record.external.command == "minify":  # its clock only shows at checkpoints
            record.seconds = max(record.seconds or 0.0, round(time.time() - record.external.started, 1))
        record.apply(event)
        if ends(event, record.external.command):
            self._end(record, None)
        ls.changed()

    def _begin(self, record: FailureRecord, begin: BeginEvent) -> None:
        continuing = record.external is not None and record.external.pid == begin.pid  # capture, then its run
        record.external = begin
        if not continuing or record.state not in RUNNING_STATES:
            state, doing = COMMANDS[begin.command]
            record.begin(state, f"aoti-minify {begin.command} (pid {begin.pid}, started outside the editor) is {doing}")
        self.ls.log(f"{record.id}: following aoti-minify {begin.command} (pid {begin.pid}) started outside the editor")
        self.ls.changed()

    def _end(self, record: FailureRecord, why: str | None) -> None:
        begin, record.external = record.external, None
        if record.state in RUNNING_STATES:
            record.state = "error"
            record.message = why or record.message or "the run ended without a result"
        self.ls.log(
            f"{record.id}: aoti-minify {begin.command if begin else ''} (pid {begin.pid if begin else '?'}) "
            f"ended: {record.message}"
        )
        self.ls.changed()
        # Its outputs (repro.py, failure.json) are on disk now; and it may have started none of them.
        refresh = asyncio.get_running_loop().create_task(self.ls.discovery.refresh([record.launcher]))
        self._refreshes.add(refresh)
        refresh.add_done_callback(self._refreshes.discard)

    def _recall_shrink(self, record: FailureRecord, events: list[Event]) -> None:
        """The shrink curve of a minification that ended before this server saw it."""
        if record.history or not events or not (isinstance(events[0], BeginEvent) and events[0].command == "minify"):
            return
        scratch = FailureRecord(id=record.id, launcher=record.launcher)
        for event in events:
            scratch.apply(event)
        if scratch.state == "minimized":
            record.history = scratch.history
            record.queries, record.seconds = scratch.queries, scratch.seconds
            record.nodes_start = scratch.nodes_start
            self.ls.changed()

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self._poll()
            except Exception as e:  # a bug here must not end the live view for good
                self.ls.log_exception("aoti-lsp: following the events logs failed", e)

    async def _poll(self) -> None:
        ls = self.ls
        records = ls.failures.records()
        await self.follow(records)
        for record in records:
            if record.external is not None and not running(record.external):
                await self.follow([record])  # what it wrote before it went
                if record.external is not None:
                    self._end(
                        record,
                        f"aoti-minify {record.external.command} (pid {record.external.pid}) "
                        "ended without a result (killed?)",
                    )
        if not ls.discovery.watching or time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + LOOK_SECONDS
            await self._look_for_dumps(records)

    async def _look_for_dumps(self, records: list[FailureRecord]) -> None:
        """New and removed run folders that no file event reported."""
        folders = {os.path.dirname(r.layout.run_dir) for r in records}
        folders.update(os.path.join(root, DEBUG_DIR) for root in self.ls.roots())
        listed = await asyncio.get_running_loop().run_in_executor(
            None, lambda: {launcher for folder in sorted(folders) for launcher in launchers_in(folder)}
        )
        known = {r.launcher for r in records}
        if listed != known:
            await self.ls.discovery.refresh(listed ^ known)
