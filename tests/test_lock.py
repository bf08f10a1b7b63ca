"""DumpLock: one run at a time per dump, and a queued run that outlives the holders it waits for."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

from minifier.contract import lock, wire
from minifier.contract.lock import DumpBusy, DumpLock, LockInfo


class Holder:
    """Another process's hold on the lock, as its waiters see it: an flock and the text naming it."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def says(self, info: LockInfo | None) -> None:
        os.ftruncate(self.fd, 0)
        if info is not None:
            os.pwrite(self.fd, wire.dumps(info).encode(), 0)

    def release(self) -> None:
        os.close(self.fd)


def test_a_queued_run_waits_through_the_moment_the_next_holder_has_the_lock_but_no_text_yet(tmp_path, monkeypatch):
    """A `run --wait` queued for long behind a reproduction, then a minify that takes the lock first: for a
    moment the lock is held by nobody it can name. That moment is not a refusal (CI, 2026-12-05: exit 6)."""
    monkeypatch.setattr(lock, "ACQUIRE_PATIENCE", 0.5)
    path = str(tmp_path / "lock")
    reproduction, minify = LockInfo(101, "run", 1.0), LockInfo(102, "minify", 2.0)
    held = Holder(path)
    held.says(reproduction)
    queued = threading.Event()
    outcome: list[object] = []
    waiter = DumpLock(path)

    def wait() -> None:
        try:
            outcome.append(waiter.acquire("run", queue_behind=lambda h: True, on_queue=lambda h: queued.set()))
        except DumpBusy as e:
            outcome.append(e)

    thread = threading.Thread(target=wait)
    thread.start()
    assert queued.wait(10)
    time.sleep(1.0)  # the patience to acquire is long spent
    held.says(None)  # the minify has the flock and has not written its text yet
    time.sleep(0.25)
    held.says(minify)
    time.sleep(0.3)
    held.says(None)  # it ended cleanly
    held.release()
    thread.join(10)
    waiter.release()
    assert outcome == [None] and waiter.waited_for == [reproduction, minify]


def test_a_holder_not_waited_for_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "ACQUIRE_PATIENCE", 0.2)
    path = str(tmp_path / "lock")
    held, killed = Holder(path), LockInfo(103, "minify", time.time())
    held.says(killed)
    with pytest.raises(DumpBusy, match=r"pid 103 \(aoti-minify minify, started .*kill 103"):
        DumpLock(path).acquire("minify")
    held.release()  # as a killed holder does: its text is left behind
    with DumpLock(path) as free:
        assert free.acquire("minify") == killed
