"""Cancelling a run: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, except inside `held()`, where
it is raised as the outermost section ends. Bookkeeping that must happen together (a message read from the fork
server and recorded) is then never cut in two: a lost worker exit would leave the shutdown waiting for it."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_pending = False


def install() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _cancel)


def _cancel(signum, frame) -> None:
    global _pending
    if _depth:
        _pending = True
        return
    raise KeyboardInterrupt


@contextmanager
def held() -> Iterator[None]:
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            _pending = False
            raise KeyboardInterrupt
