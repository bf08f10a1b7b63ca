"""The failure list (`aoti/failures` and `aoti/failuresChanged`): what the client's Inductor Failures
view shows, sent again whenever an item of it changes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .failures import FailureRecord
from .feature import Feature
from .protocol import FAILURES, FAILURES_CHANGED, failure_list

if TYPE_CHECKING:
    from .server import AotiLanguageServer


class FailureList(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self._listed: dict[str, Any] | None = None

    def register(self) -> None:
        @self.ls.feature(FAILURES)
        def failures(params: Any) -> dict[str, Any]:
            return _listing(self.ls.failures.records())

    def failures_changed(self, records: list[FailureRecord]) -> None:
        if not self.ls.aoti_client:  # another editor would only log an unknown notification
            return
        listed = _listing(records)
        if listed != self._listed:
            self._listed = listed
            self.ls.protocol.notify(FAILURES_CHANGED, listed)


def _listing(records: list[FailureRecord]) -> dict[str, Any]:
    return failure_list([r.item() for r in records])
