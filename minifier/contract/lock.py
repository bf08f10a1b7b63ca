"""One run at a time per dump: a lock file in the dump's scratch folder (DumpLayout.lock).

`aoti-minify run` and `minify` hold an exclusive flock(2) on it for their whole run. Two runs on one
dump (two terminals, or a terminal and the editor) share the scratch folder, the checkpoints and
repro.py: the second would delete the first one's saved candidates and write a repro.py of another
search. The lock belongs to the open file, so a holder that dies, even by SIGKILL, releases it; the
file's text ({pid, command, started}) only names the holder. A run that ends cleanly empties it, so
text found by the next holder means that the previous run was killed: its leftovers are suspect.

A run may queue behind a holder instead of refusing (`queue_behind`): the one to come after a reproduction
(`run`, often the editor's own, started the moment the dump appeared) is the user's minify typed in a terminal.

Stdlib only: the language server reads the lock to tell whether a run on a dump is alive.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import wire

# A reader (the language server asking "is anyone on it?") holds the lock for a moment: a run that
# starts just then tries again rather than refuse.
ACQUIRE_PATIENCE = 2.0
QUEUE_POLL = 0.2  # while queued behind a holder: how often the lock is tried again


@dataclass(frozen=True)
class LockInfo:
    """Who holds (or, found by the next holder, last held) a dump's lock."""

    pid: int
    command: str
    started: float  # time.time()

    def describe(self) -> str:
        if not self.pid:
            return "another aoti-minify (starting)"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} (aoti-minify {self.command}, started {started})"


class DumpBusy(RuntimeError):
    """Another run holds the dump."""

    def __init__(self, path: str, holder: LockInfo) -> None:
        stop = f", or stop it (kill {holder.pid})" if holder.pid else ""
        super().__init__(
            f"another aoti-minify works on this dump: {holder.describe()}; wait for it to finish{stop} "
            f"(its lock: {path})"
        )
        self.holder = holder


class DumpLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self.waited_for: list[LockInfo] = []  # the holders this run queued behind, in turn

    def acquire(
        self,
        command: str,
        queue_behind: Callable[[LockInfo], bool] = lambda holder: False,
        on_queue: Callable[[LockInfo], None] = lambda holder: None,
    ) -> LockInfo | None:
        """Take the lock, or raise DumpBusy; a holder that `queue_behind` accepts is waited for instead
        (`on_queue` is told each new one). Returns the previous holder if it was killed (it left its text
        behind), else None. OSError if the lock file cannot be created."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._take(fd, queue_behind, on_queue)
        except BaseException:  # refused, or Ctrl-C while queued
            os.close(fd)
            raise
        self._fd = fd
        stale = _read(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, wire.dumps(LockInfo(os.getpid(), command, time.time())).encode(), 0)
        except OSError:
            self.release()
            raise
        return stale

    def _take(self, fd: int, queue_behind: Callable[[LockInfo], bool], on_queue: Callable[[LockInfo], None]) -> None:
        deadline = time.monotonic() + ACQUIRE_PATIENCE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            holder = _read(fd)
            if holder is not None and queue_behind(holder):
                if holder not in self.waited_for:
                    self.waited_for.append(holder)
                    on_queue(holder)
                # The next holder (another queued run, or a reader) has the flock a moment before its text:
                # that moment is granted the patience anew, counted from the last holder that was waited for.
                deadline = time.monotonic() + ACQUIRE_PATIENCE
                time.sleep(QUEUE_POLL)
            elif time.monotonic() > deadline:
                raise DumpBusy(self.path, holder or LockInfo(0, "", 0.0))
            else:
                time.sleep(0.05)

    def release(self) -> None:
        """Say that the run ended cleanly (an empty file), then let go."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass  # a full or read-only disk: the next run takes this run for a killed one, and checks
        os.close(self._fd)  # closing the last descriptor releases the flock
        self._fd = None

    def __enter__(self) -> DumpLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: str) -> LockInfo | None:
    """Who works on the dump now, None when nobody does (a killed holder counts as nobody)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return _read(fd) or LockInfo(0, "", 0.0)
            return None
        return None  # free: closing the descriptor below lets go of the shared lock again
    finally:
        os.close(fd)


def _read(fd: int) -> LockInfo | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        return wire.decode(LockInfo, json.loads(text)) if text else None
    except (OSError, ValueError):
        return None  # an unreadable text: as good as none, the flock is what counts
