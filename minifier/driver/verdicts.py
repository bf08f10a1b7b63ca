"""The verdict rules: when a candidate's result counts as the same failure, and when a candidate's verdict is
known without compiling it.

A candidate `fails` only with the target signature (or an error matching --check-str); any other
error is `other_failure`, and a dead or overdue worker is `crash` or `timeout`. A failure is taken to need
all of its nodes (monotone, as in CDD and ProbDD): a part of a graph that passed passes, and a graph whose
part failed fails. Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..contract.events import Verdict
from ..contract.signature import ErrorAnalysis, Signature, crash_signature

if TYPE_CHECKING:
    from ..processes.pool import Result

Nodes = frozenset[str]  # a candidate (search.Candidate)


def result_signature(result: Result) -> tuple[Signature | None, ErrorAnalysis | None]:
    """The signature of a failing result (None when it passed or was not exportable)."""
    if result.kind == "crash":
        return crash_signature(result.signal), None
    if result.kind == "timeout":
        return Signature(exc_type="Timeout", message="no verdict in time", kind="timeout"), None
    outcome = result.outcome
    if outcome is None or outcome.status != "raised" or outcome.error is None:
        return None, None
    return outcome.error.signature, outcome.error


def classify(result: Result, target: Signature | None, check_str: str | None) -> Verdict:
    """`fails` only for the same failure: the target signature, or the --check-str regex; and a compile
    stopped because it generated a failing compile's code unchanged (TrialOptions.failing_code)."""
    if result.outcome is not None and result.outcome.status == "unchanged":
        return "fails"
    signature, _ = result_signature(result)
    if signature is None:
        return "export_error" if result.outcome and result.outcome.status == "export_error" else "passes"
    if check_str is not None:
        text = (result.outcome.text if result.outcome else result.detail) or ""
        return "fails" if check_str_matches(check_str, text) else _other(result)
    if target is None or target.matches(signature):
        return "fails"
    return _other(result)


def check_str_matches(check_str: str, text: str) -> bool:
    try:
        return re.search(check_str, text) is not None
    except re.error:  # not a valid regex: PyTorch's plain-substring meaning
        return check_str in text


def _other(result: Result) -> Verdict:
    return {"crash": "crash", "timeout": "timeout"}.get(result.kind, "other_failure")  # type: ignore[return-value]


def one_line(result: Result) -> str:
    """What a result says in one line: its error's signature, else the first line of its text or detail."""
    if result.outcome is None:
        return result.detail.splitlines()[0] if result.detail else ""
    if result.outcome.status == "unchanged":
        return "the failing compile's code, generated unchanged: not compiled again"
    if result.outcome.error is not None:
        return result.outcome.error.signature.describe()
    return result.outcome.text.splitlines()[0] if result.outcome.text else ""


def implied_passing(candidates: Sequence[Nodes], verdicts: Mapping[Nodes, str]) -> list[Nodes]:
    """The undecided candidates that are part of a graph that passed: they pass too, uncompiled."""
    passed = [c for c, v in verdicts.items() if v == "passes"]
    return [c for c in candidates if c not in verdicts and any(c < clean for clean in passed)]


def with_implied_failures(verdicts: Mapping[Nodes, str], ahead: Mapping[Nodes, Sequence[Nodes]]) -> Mapping[Nodes, str]:
    """The verdicts, and "fails" for each undecided candidate whose round after it (`ahead`, run ahead of its
    verdict) holds a failing graph: a part of it failed."""
    implied = {
        c: "fails"
        for c, upcoming in ahead.items()
        if c not in verdicts and any(verdicts.get(u) == "fails" for u in upcoming)
    }
    return {**verdicts, **implied} if implied else verdicts


def raised_before_build(result: Result) -> bool:
    """The whole graph's compile raised before its code was built (a codegen KeyError, a Triton kernel that
    does not compile): what reaches the build cannot fail that way. Only a compile error counts: a compile served
    from Inductor's cache never reaches the build either, and then fails at run time (a device-side assert)."""
    outcome = result.outcome
    return (
        outcome is not None
        and outcome.status == "raised"
        and outcome.built is False
        and outcome.error is not None
        and outcome.error.signature.kind == "compile_error"
    )
