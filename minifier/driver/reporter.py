"""How a command talks to its caller: human progress on stderr; with --events, JSON lines on stdout;
and, once it knows its dump, the same events appended to the dump's events log, which an editor
that did not start the command tails to show it live.

A caller that goes away (the language server killed) closes those pipes: the run must still end as it
would have, writing its files, so what can no longer be said is dropped.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterable
from typing import IO, TextIO

from ..contract.events import (
    EVENTS_LOG_LIMIT,
    BeginEvent,
    Command,
    Event,
    LogEvent,
    LogLevel,
    MemoryEvent,
    encode_event,
)


def begin_event(command: Command, launcher: str) -> BeginEvent:
    return BeginEvent(
        command=command, pid=os.getpid(), host=socket.gethostname(), started=time.time(), launcher=launcher
    )


def append_events(path: str, events: Iterable[Event]) -> None:
    """Append to an events log; a log past EVENTS_LOG_LIMIT is started afresh first (it is a live
    view, not an archive: the outputs themselves are the record)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        too_big = os.path.getsize(path) > EVENTS_LOG_LIMIT
    except OSError:
        too_big = False
    with open(path, "w" if too_big else "a", encoding="utf-8") as f:
        f.write("".join(encode_event(e) + "\n" for e in events))


class Reporter:
    def __init__(self, events: bool) -> None:
        self.events = events
        self._log: IO[str] | None = None
        self._log_path: str | None = None
        self._waiting_for_memory = 0

    def record_to(self, path: str, command: Command, launcher: str) -> None:
        """From now on, also append every event to the events log at `path`, after a `begin` event."""
        self.close()
        try:
            append_events(path, [begin_event(command, launcher)])
            self._log = open(path, "a", encoding="utf-8")
            self._log_path = path
        except OSError as e:  # the run goes on; only editors that did not start it miss it
            self.log(f"cannot write the events log {path}: {e.strerror or e}", "warning")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def emit(self, event: Event) -> None:
        line = encode_event(event) + "\n"
        if self.events:
            _write(sys.stdout, line)
        if self._log is not None:
            try:
                self._log.write(line)
                self._log.flush()
            except OSError as e:  # a full disk must not stop the minification
                self._log = None
                self.say(f"warning: stopped writing the events log {self._log_path}: {e.strerror or e}")

    def say(self, text: str) -> None:
        _write(sys.stderr, f"[aoti-minify] {text}\n")

    def log(self, text: str, level: LogLevel = "info") -> None:
        self.say(text if level == "info" else f"warning: {text}")
        self.emit(LogEvent(message=text, level=level))

    def memory(self, waiting: int, detail: str) -> None:
        """Say when queries start or stop waiting for memory (a `memory` event, and a progress line)."""
        if waiting == self._waiting_for_memory:
            return
        self._waiting_for_memory = waiting
        if waiting:
            self.say(f"{waiting} candidate(s) ran out of memory beside others: they run again alone ({detail})")
        self.emit(MemoryEvent(waiting=waiting, detail=detail))

    def warn_new(self, warnings: Iterable[str], seen: set[str]) -> None:
        """Log each of `warnings` not in `seen` yet (the pool's warnings grow as workers start)."""
        for warning in warnings:
            if warning not in seen:
                seen.add(warning)
                self.log(warning, "warning")

    def result(self, text: str) -> None:
        """The command's answer: on stdout for people, on stderr when stdout carries events."""
        _write(sys.stderr if self.events else sys.stdout, text + "\n")


def _write(stream: TextIO, text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except OSError:  # a broken pipe, a closed terminal
        # Nobody reads any more: point the stream at /dev/null, so that neither this nor the flush at
        # exit raises again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except ValueError:  # the stream is closed
        pass
