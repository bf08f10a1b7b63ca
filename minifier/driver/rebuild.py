"""repro_standalone.py: the final graph as plain PyTorch code, written only once it is shown to fail.

A worker writes the graph as code (standalone.py), first with seeded random values for large float
tensors, then, should that not reproduce the failure, with every value exact; each attempt is
compiled and run in a worker like any candidate and must get the `fails` verdict. A graph that
cannot be written as code, or whose code does not fail the same way, gets the fallback file that
says so and runs repro.py. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..contract.artifacts import render_standalone, render_standalone_fallback, write_text
from ..contract.events import Verdict
from ..exchange import worker_protocol as p
from ..processes.pool import Pool, Result
from .session import Session

_SAID = {"passes": "does not fail", "export_error": "cannot be exported"}


@dataclass(frozen=True)
class Trial:
    """One attempt at repro_standalone.py, written beside the candidates: its text and the query that checks it."""

    text: str
    query: p.QueryRequest


def standalone_trial(
    session: Session, pool: Pool, kept: list[str], header: list[str], exact: bool, tag: str = ""
) -> Trial | str:
    """The graph made of `kept` as repro_standalone.py, or why it cannot be written as code."""
    reply = pool.call(p.StandaloneRequest(kept=kept, values_path=session.layout.values, exact=exact))
    if not isinstance(reply, p.StandaloneCode) or reply.code is None:
        return getattr(reply, "reason", "") or f"the worker answered {type(reply).__name__}"
    text = render_standalone(session.spec, session.accuracy, reply.code, header, session.options.imports)
    path = os.path.join(session.layout.candidates, f"standalone-{_values(exact).replace(' ', '-')}{tag}.py")
    write_text(path, text)
    return Trial(text, p.QueryRequest(key=os.path.basename(path), program=p.StandaloneScript(path)))


def write_standalone(
    session: Session,
    pool: Pool,
    kept: list[str],
    header: list[str],
    verdict: Callable[[Result], Verdict],
    checked: tuple[Trial, Result] | None = None,
) -> tuple[str, str | None]:
    """Write repro_standalone.py; returns its path and, where it falls back to repro.py, why. `checked`: the
    seeded-random attempt, already run beside the search."""
    try:
        return _write_standalone(session, pool, kept, header, verdict, checked)
    except KeyboardInterrupt:  # after `done`: no earlier run's file may pass for this graph's
        cancelled = render_standalone_fallback("cancelled before it was checked", header)
        write_text(session.layout.repro_standalone, cancelled)
        raise


def _write_standalone(
    session: Session,
    pool: Pool,
    kept: list[str],
    header: list[str],
    verdict: Callable[[Result], Verdict],
    checked: tuple[Trial, Result] | None,
) -> tuple[str, str | None]:
    layout = session.layout
    reasons = []
    for exact in (False, True):
        if checked is not None and not exact:
            trial, result = checked
        else:
            made = standalone_trial(session, pool, kept, header, exact)
            if isinstance(made, str):
                reasons.append(made)
                break
            trial = made
            [result] = pool.evaluate([trial.query], lambda r: True)
        found = verdict(result)
        if found == "fails":
            write_text(layout.repro_standalone, trial.text)
            return layout.repro_standalone, None
        reasons.append(f"with {_values(exact)} values it {_SAID.get(found, f'fails another way ({found})')}")
    reason = "; ".join(reasons)
    write_text(layout.repro_standalone, render_standalone_fallback(reason, header))
    return layout.repro_standalone, reason


def _values(exact: bool) -> str:
    return "exact" if exact else "seeded random"
