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

from . import worker_protocol as p
from .artifacts import render_standalone, render_standalone_fallback, write_text
from .events import Verdict
from .pool import Pool, Result
from .session import Session

_SAID = {"passes": "does not fail", "export_error": "cannot be exported"}


def write_standalone(session: Session, pool: Pool, kept: list[str], header: list[str],
                     verdict: Callable[[Result], Verdict]) -> tuple[str, str | None]:
    """Write repro_standalone.py; returns its path and, where it falls back to repro.py, why."""
    layout = session.layout
    reasons = []
    for exact in (False, True):
        values = "exact" if exact else "seeded random"
        reply = pool.call(p.StandaloneRequest(kept=kept, values_path=layout.values, exact=exact))
        if not isinstance(reply, p.StandaloneCode) or reply.code is None:
            reasons.append(getattr(reply, "reason", "") or f"the worker answered {type(reply).__name__}")
            break
        text = render_standalone(session.spec, session.accuracy, reply.code, header, session.options.imports)
        trial = os.path.join(layout.candidates, f"standalone-{values.replace(' ', '-')}.py")
        write_text(trial, text)
        [result] = pool.evaluate([p.QueryRequest(key=os.path.basename(trial), script=trial)], lambda r: True)
        found = verdict(result)
        if found == "fails":
            write_text(layout.repro_standalone, text)
            return layout.repro_standalone, None
        reasons.append(f"with {values} values it {_SAID.get(found, f'fails another way ({found})')}")
    reason = "; ".join(reasons)
    write_text(layout.repro_standalone, render_standalone_fallback(reason, header))
    return layout.repro_standalone, reason
