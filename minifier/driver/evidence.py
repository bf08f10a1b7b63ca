"""What a source of evidence raced beside the search is: it runs queries of its own on the pool and turns each of
their answers into leads, the node sets the search races as guesses (`search.Race.race`). The sources:
kernel_evidence.py (the failing kernel), accuracy_probe.py (the first diverging value, lying fake kernels),
early_check.py (the final graph's standalone check, which brings no leads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..exchange.worker_protocol import GraphInfo
from ..processes.pool import Pool, Result
from .reporter import Reporter
from .search import Candidate, Space
from .session import Session


@dataclass(frozen=True)
class Context:
    """What every source works with: the dump's session, the pool, the reporter, the search's space and graph."""

    session: Session
    pool: Pool
    reporter: Reporter
    space: Space
    graph: GraphInfo


class Evidence(Protocol):
    def owns(self, result: Result) -> bool:
        """Whether `result` answers one of this source's queries."""
        ...

    def answer(self, result: Result) -> list[Candidate]:
        """The leads an answer of its own brings (none is an answer too)."""
        ...


class Source:
    """What every source holds from its start (a base, so that their constructors do not repeat it)."""

    def __init__(self, context: Context) -> None:
        self.session, self.pool, self.reporter = context.session, context.pool, context.reporter
        self.space, self.graph = context.space, context.graph
