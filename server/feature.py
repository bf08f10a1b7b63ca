"""What a server feature is (the shape of esbonio's LanguageFeature): it registers its own LSP
handlers and follows the server's life through hooks, so that what one feature does when, say, the
settings change is all in its own file.

The server calls each hook on every feature, in the order of `AotiLanguageServer.features`; a
feature overrides the hooks it needs, the others do nothing.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .failures import FailureRecord
    from .protocol import Settings
    from .server import AotiLanguageServer


class Feature:
    def __init__(self, ls: AotiLanguageServer) -> None:
        self.ls = ls

    def register(self) -> None:
        """Add this feature's LSP handlers and commands; called once, before the server starts."""

    async def initialized(self) -> None:
        """The client is ready (`initialized`); the settings it sent with `initialize` are in."""

    async def settings_changed(self, old: Settings) -> None:
        """`ls.settings` has replaced `old` (workspace/didChangeConfiguration)."""

    def failures_changed(self, records: list[FailureRecord]) -> None:
        """Failures changed: once per event-loop turn however many did, with all of them."""

    async def shutdown(self) -> None:
        """The client asked the server to shut down: stop what runs, orderly."""

    def exit(self) -> None:
        """The server process ends now: whatever still runs must go."""


def handler(method: Callable[..., Any]) -> Callable[..., Any]:
    """A feature's bound method as pygls takes a handler: a plain function (pygls marks its handlers with
    attributes, which a bound method cannot take) with the method's parameters and resolved types (from which
    pygls structures a command's arguments)."""
    call: Callable[..., Any]
    if inspect.iscoroutinefunction(method):

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await method(*args, **kwargs)
    else:

        def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

    call.__signature__ = inspect.signature(method)  # type: ignore[union-attr]  # read by inspect.signature
    call.__annotations__ = typing.get_type_hints(method)
    call.__name__ = call.__qualname__ = method.__name__
    return call
