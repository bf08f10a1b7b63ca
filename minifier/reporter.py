"""How a command talks to its caller: human progress on stderr; with --events, JSON lines on stdout.

A caller that goes away (the language server killed) closes those pipes: the run must still end as it
would have, writing its files, so what can no longer be said is dropped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TextIO

from .events import Event, LogEvent, encode_event


class Reporter:
    def __init__(self, events: bool) -> None:
        self.events = events

    def emit(self, event: Event) -> None:
        if self.events:
            _write(sys.stdout, encode_event(event) + "\n")

    def say(self, text: str) -> None:
        _write(sys.stderr, f"[aoti-minify] {text}\n")

    def log(self, text: str, level: str = "info") -> None:
        self.say(text if level == "info" else f"warning: {text}")
        self.emit(LogEvent(message=text, level=level))

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
