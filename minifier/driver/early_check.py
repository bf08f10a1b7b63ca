"""The standalone check of a graph likely to end the search, started early: after the search it would be one
more compile on the critical path, so it starts beside that graph's own compile, or the round that proves it,
on a worker that is idle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..processes.pool import Pool, Result, WorkerLost
from .rebuild import Trial, standalone_trial
from .reporter import Reporter
from .search import Candidate, key_of
from .session import Session


class EarlyCheck:
    """An `evidence.Evidence` that brings no leads: it needs neither the search's space nor its graph."""

    def __init__(
        self,
        session: Session,
        pool: Pool,
        reporter: Reporter,
        header: Callable[[int], list[str]],
        progress: Callable[[], str],
    ) -> None:
        self.session, self.pool, self.reporter = session, pool, reporter
        self.header = header  # repro_standalone.py's header for a graph of N nodes
        self.progress = progress  # the progress line the reporter prints
        self.started: tuple[Candidate, Trial] | None = None
        self.result: Result | None = None

    def start(self, candidate: Candidate) -> None:
        """Check this graph's standalone repro in the background, if a worker is idle (else after the search)."""
        self.drop()
        if not self.pool.idle():
            return
        try:
            trial = standalone_trial(
                self.session,
                self.pool,
                sorted(candidate),
                self.header(len(candidate)),
                exact=False,
                tag=f"-{key_of(candidate)}",
            )
        except WorkerLost as e:  # a head start only: the check runs after the search as before
            self.reporter.log(f"the early standalone check could not start: {str(e).splitlines()[0]}", "warning")
            return
        if isinstance(trial, Trial):
            # beside the same graph's own compile: in the shared cache, Inductor's lock would queue the two
            trial = replace(trial, query=replace(trial.query, own_cache=True))
            self.started = (candidate, trial)
            self.pool.submit(trial.query, background=True)
            self.reporter.say(
                f"{self.progress()} | the {len(candidate)}-node graph likely ends the search: "
                "its standalone check starts beside it"
            )

    def owns(self, result: Result) -> bool:
        return self.started is not None and result.query.key == self.started[1].query.key

    def answer(self, result: Result) -> list[Candidate]:
        """No leads: the answer is kept for `result_for`."""
        self.result = result
        return []

    def drop(self) -> None:
        if self.started is not None:
            self.pool.cancel(self.started[1].query.key)
            self.started, self.result = None, None

    def drop_unless_for(self, candidate: Candidate) -> None:
        if self.started is not None and self.started[0] != candidate:
            self.drop()

    def result_for(self, final: Candidate, wait: Callable[[], None]) -> tuple[Trial, Result] | None:
        """The check started for `final`, once it answered (`wait` takes the pool's next answers); None if it was
        for another graph, or none was started."""
        if self.started is None:
            return None
        candidate, trial = self.started
        if candidate != final:
            self.pool.cancel(trial.query.key)
            return None
        while self.result is None and self.pool.in_flight():
            wait()
        return (trial, self.result) if self.result is not None else None
