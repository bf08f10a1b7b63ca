"""Finding failures: scan workspace folders and debugDirRoots for
`torch_compile_debug/run_*/minifier/minifier_launcher.py`, then follow file events.

Scans and launcher parsing run in the default executor so a large workspace never blocks the event
loop. Any file event inside a run folder (launcher, failure.json, repro.py, checkpoints, or the
folder itself going away) re-reads that one failure from disk.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from minifier.contract.layout import (
    CHECKPOINTS,
    DEBUG_DIR,
    FAILURE_JSON,
    LAUNCHER,
    MINIFIER,
    REPORT_MD,
    REPRO_PY,
    RUN_GLOB,
    captured,
    launcher_for,
    launchers_in,
)
from minifier.contract.lock import holder as lock_holder

from .failures import FailureRecord, OnDisk, read_disk
from .feature import Feature

if TYPE_CHECKING:
    from .jobs import Jobs
    from .protocol import Settings
    from .server import AotiLanguageServer

SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})
WATCHED = [
    (f"**/{RUN_GLOB}/{MINIFIER}/{{{LAUNCHER},{FAILURE_JSON},{REPRO_PY},{REPORT_MD}}}", None),
    (f"**/{RUN_GLOB}/{MINIFIER}/{CHECKPOINTS}/*.py", None),
    (f"**/{RUN_GLOB}", types.WatchKind.Delete),  # a deleted folder is reported once, not per file
]


def scan(roots: Iterable[str]) -> list[str]:
    """The launchers under these folders. Symbolic links to folders are not followed (a link back up
    makes a loop, one to / a whole disk), except a torch_compile_debug that is one: a debug folder
    kept on a scratch disk is common, and only its run folders are looked at."""
    found: set[str] = set()
    for root in roots:
        for folder, subfolders, _ in os.walk(root):
            if os.path.basename(folder) == DEBUG_DIR:
                found.update(launchers_in(folder))
                subfolders.clear()
                continue
            if DEBUG_DIR in subfolders and os.path.islink(linked := os.path.join(folder, DEBUG_DIR)):
                found.update(launchers_in(linked))
            subfolders[:] = [d for d in subfolders if d not in SKIP_DIRS and not d.startswith(".")]
    return sorted(found)


class Discovery(Feature):
    def __init__(self, ls: AotiLanguageServer, jobs: Jobs) -> None:
        super().__init__(ls)
        self.jobs = jobs  # what it starts (background reproductions) and stops
        self.watch_registration: str | None = None
        self.scanned_roots: list[str] = []

    def register(self) -> None:
        ls = self.ls

        @ls.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
        async def files_changed(params: types.DidChangeWatchedFilesParams) -> None:
            launchers: set[str] = set()
            for change in params.changes:
                path = to_fs_path(change.uri)
                if not path:
                    continue
                path = os.path.normpath(path)  # noqa: ASYNC240 (string work alone: a file URI's path is absolute)
                if (launcher := launcher_for(path)) is not None:
                    launchers.add(launcher)
                inside = path + os.sep
                launchers.update(r.launcher for r in ls.failures.records() if r.launcher.startswith(inside))
            if launchers:
                await self.refresh(launchers)

    async def initialized(self) -> None:
        await asyncio.gather(self.watch(), self.rescan())

    async def settings_changed(self, old: Settings) -> None:
        if self.ls.roots() != self.scanned_roots:  # new folders, or other debugDirRoots
            await self.watch()
            await self.rescan()
        elif self.ls.settings.trusted and not old.trusted:
            self.start_background_work(self.ls.failures.records())

    @property
    def watching(self) -> bool:
        """The client reports file events (else LiveRuns looks for new dumps itself)."""
        return self.watch_registration is not None

    async def watch(self) -> None:
        """(Re-)register file watchers for the workspace and every debugDirRoot."""
        ls = self.ls
        capability = ls.client_capabilities.workspace and ls.client_capabilities.workspace.did_change_watched_files
        if not (capability and capability.dynamic_registration):
            ls.log(
                "this client cannot watch files for aoti-lens (no dynamic registration of "
                "workspace/didChangeWatchedFiles): new dumps show up on a rescan (change a setting or restart)"
            )
            return
        watchers = [types.FileSystemWatcher(glob_pattern=glob, kind=kind) for glob, kind in WATCHED]
        extra = ls.debug_roots()
        if extra and capability.relative_pattern_support:
            for root in extra:
                base = os.path.dirname(root) if os.path.basename(root) == DEBUG_DIR else root
                watchers += [
                    types.FileSystemWatcher(
                        glob_pattern=types.RelativePattern(base_uri=from_fs_path(base) or base, pattern=glob), kind=kind
                    )
                    for glob, kind in WATCHED
                ]
        elif extra:
            ls.log(
                "this client cannot watch folders outside the workspace (no relative glob patterns): "
                "debugDirRoots are scanned on start and on settings changes only"
            )
        try:
            if self.watch_registration is not None:
                await ls.client_unregister_capability_async(
                    types.UnregistrationParams(
                        unregisterations=[
                            types.Unregistration(
                                id=self.watch_registration, method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES
                            )
                        ]
                    )
                )
            registration = str(uuid.uuid4())
            await ls.client_register_capability_async(
                types.RegistrationParams(
                    registrations=[
                        types.Registration(
                            id=registration,
                            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
                        )
                    ]
                )
            )
            self.watch_registration = registration
        except Exception as e:  # the client refused: discovery still works through rescans
            ls.log(
                f"could not register file watchers ({type(e).__name__}: {e}); new dumps show up on a rescan",
                types.MessageType.Warning,
            )

    async def rescan(self) -> None:
        ls = self.ls
        roots = self.scanned_roots = ls.roots()
        loop = asyncio.get_running_loop()
        for root in await loop.run_in_executor(None, lambda: [r for r in roots if not os.path.isdir(r)]):
            ls.log(f"not scanning {root}: no such folder", types.MessageType.Warning)
        found = await loop.run_in_executor(None, scan, roots)
        for record in ls.failures.records():
            if record.launcher not in found:
                self.forget(record, "it is no longer in the workspace or debugDirRoots")
        await self.refresh(found)
        ls.log(f"scanned {', '.join(roots) or 'nothing'}: {len(found)} failure(s)")

    async def refresh(self, launchers: Iterable[str]) -> None:
        """Re-read these failures from disk; a missing launcher means its run folder was deleted."""
        ls = self.ls
        paths = sorted(set(launchers))
        disks = await asyncio.get_running_loop().run_in_executor(None, _read_all, paths)
        fresh = []
        for launcher, disk in zip(paths, disks):
            record = ls.failures.by_launcher(launcher)
            if disk is not None and captured(os.path.dirname(os.path.dirname(launcher))):
                disk = None  # `capture` snapshotted it: the snapshots stand for it
            if disk is None:
                if record is not None:
                    self.forget(record, f"{record.layout.run_dir} was deleted or captured")
                continue
            if record is None:
                record = ls.failures.add(launcher)
                ls.log(f"found {record.noun} {record.id} at {launcher}")
            if self.jobs.working_on(record) is None:  # while a run goes on, its events are the truth
                record.sync(disk)
            if record.problem:
                ls.log(f"{record.id}: {record.problem}", types.MessageType.Warning)
            fresh.append(record)
        await ls.live.follow(fresh)  # before anything shows: a run elsewhere may be working on them
        ls.changed()
        self.start_background_work(fresh)

    def forget(self, record: FailureRecord, why: str) -> None:
        self.jobs.cancel(record.id, why)
        self.ls.failures.remove(record.id)
        self.ls.live.forget(record.id)
        self.ls.log(f"{record.id}: removed because {why}", types.MessageType.Warning)
        self.ls.changed()

    def start_background_work(self, records: Iterable[FailureRecord]) -> None:
        """Learn what each new failure is (signature, kernel line) in the background, when allowed; if
        that starts nothing, at least have warm workers wait for the user's Minify."""
        ls = self.ls
        if not ls.settings.trusted:
            return
        usable = [record for record in records if record.usable and record.external is None]
        started = False
        for record in usable:
            if (
                ls.settings_for(record.launcher).auto_reproduce
                and record.failure is None
                and record.state == "found"
                and not self.jobs.running(record.id)
            ):
                if (other := lock_holder(record.layout.lock)) is not None:  # a terminal's run: it writes the result
                    ls.log(f"{record.id}: not reproduced in the background while {other.describe()} works on it")
                    continue
                self.jobs.start(record, "run", user=False)
                started = True
        if usable and not started:  # a job started here warms the fork server itself
            self.jobs.warm(usable[0].launcher)


def _read_all(launchers: list[str]) -> list[OnDisk | None]:
    return [read_disk(p) for p in launchers]
