"""How a command talks to its caller: human progress on stderr; with --events, JSON lines on stdout."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from .events import Event, LogEvent, encode_event


class Reporter:
    def __init__(self, events: bool) -> None:
        self.events = events

    def emit(self, event: Event) -> None:
        if self.events:
            sys.stdout.write(encode_event(event) + "\n")
            sys.stdout.flush()

    def say(self, text: str) -> None:
        sys.stderr.write(f"[aoti-minify] {text}\n")
        sys.stderr.flush()

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
        stream = sys.stderr if self.events else sys.stdout
        stream.write(text + "\n")
        stream.flush()
