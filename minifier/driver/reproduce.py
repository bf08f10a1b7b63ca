"""`aoti-minify run`: reproduce a dumped failure once, in a worker, and write failure.json."""

from __future__ import annotations

import time
from dataclasses import replace

from ..contract.artifacts import write_failure
from ..contract.events import Failure, FailureEvent, FakeMismatch
from ..exchange import worker_protocol as p
from ..exchange.provenance import failing_kernel, model_lines, read_kernel_source, resolve_kernel, untraced_failure
from ..exchange.worker_protocol import GraphInfo
from ..exchange.worklog import provenance_in
from ..processes.pool import Pool, Result, WorkerLost
from .reporter import Reporter
from .session import Session
from .verdicts import classify, result_signature

ORIGINAL_KEY = "original"


def reproduce(session: Session, reporter: Reporter) -> Failure | None:
    """The failure as it happens now, or None when the program no longer fails."""
    started = time.monotonic()
    reporter.say(f"reproducing {session.spec.path}")
    pool = session.pool(size=1)
    try:
        graph = pool.call(p.DescribeRequest()).graph
        reporter.warn_new(pool.warnings, set())
        [result] = pool.evaluate(
            [p.QueryRequest(key=ORIGINAL_KEY, program=p.OriginalProgram(), provenance=True)], on_result=lambda r: True
        )
        if classify(result, None, session.check_str) != "fails":
            return None
        lies = fake_kernel_lies(pool, session, reporter)
    finally:
        pool.close()
    failure = replace(describe_failure(session, graph, result, time.monotonic() - started), fake_kernels=lies)
    for lie in lies:
        where = f" (its fake kernel: {lie.file}:{lie.line})" if lie.file else ""
        reporter.log(f"{lie.describe()}: compiled code trusts the fake kernel{where}", "warning")
    path = write_failure(session.layout, failure)
    reporter.emit(FailureEvent(path=path, failure=failure))
    return failure


def fake_kernel_lies(pool: Pool, session: Session, reporter: Reporter) -> list[FakeMismatch]:
    """The custom ops of the original whose fake kernel tells export other sizes than they return, from one
    eager run: whatever Inductor does, compiled code trusts those sizes, so the fix is the fake kernel."""
    try:
        checked = pool.call(p.FakeCheckRequest(), timeout=session.options.timeout)
    except WorkerLost as e:
        reporter.log(f"the eager run that checks the fake kernels lost its worker: {e.reason}", "warning")
        return []
    if checked.error:
        reporter.log(f"the fake kernels could not be checked: {checked.error}", "warning")
    return checked.mismatches


def describe_failure(session: Session, graph: GraphInfo, result: Result, seconds: float) -> Failure:
    signature, analysis = result_signature(result)
    assert signature is not None
    provenance = provenance_in(result.log)
    kernel = failing_kernel(analysis, result.log, provenance)
    kernel_source = read_kernel_source(kernel) if kernel else None
    if kernel is not None:
        kernel = resolve_kernel(kernel, graph, kernel_source, provenance=provenance)
    details = result.outcome.text if result.outcome else result.detail
    # A call the launch trace does not show raised first and the run failed later, in a kernel that read what it
    # left undefined (the proxy executor's complex sub on CUDA): the model's lines are those of the calls.
    untraced = untraced_failure(result.log, provenance) if kernel is None else None
    suspects = untraced.nodes(provenance) if untraced else []
    if untraced:
        details = (
            f"first raised, by one of {', '.join(suspects)} (not in the launch trace): {untraced.raised}\n\n{details}"
        )
    return Failure(
        launcher=session.spec.path,
        signature=signature,
        headline=analysis.headline if analysis else result.detail.split("; last log lines")[0],
        details=details,
        kernel=kernel,
        kernel_source=kernel_source,
        model_lines=model_lines(kernel.source_nodes if kernel else suspects, graph),
        nodes=len(graph.compute_nodes()),
        graph=graph.code,
        torch_version=graph.torch_version,
        device=graph.device,
        seconds=round(seconds, 2),
    )
