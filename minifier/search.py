"""The search for a smallest failing subgraph. Pure logic over sets of node names; torch-free.

A candidate is a set of compute nodes of the original graph (see graph.build_candidate), so removing
an interior node, dead code, unused inputs and outputs, and truncation are all just smaller sets.
The search is delta debugging (ddmin) over contiguous chunks in topological order, preceded by the
kernel-origin slices when the failure names its kernel. It returns a 1-minimal set: removing any
single node makes the failure go away.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Candidate = frozenset[str]


class Oracle(Protocol):
    def first_failing(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """Test candidates (concurrently where it can); return one that fails, or None."""


@dataclass(frozen=True)
class Space:
    order: list[str]
    closure: Callable[[Iterable[str]], Candidate]

    @property
    def whole(self) -> Candidate:
        return frozenset(self.order)

    def ordered(self, nodes: Candidate) -> list[str]:
        return [n for n in self.order if n in nodes]


def make_closure(args: dict[str, list[str]], cuttable: set[str]) -> Callable[[Iterable[str]], Candidate]:
    """Candidates must be buildable: a kept node whose input cannot be fed as a concrete tensor
    (a tuple-valued node, or one past where the eager run stopped) keeps that input's producer."""

    def closure(nodes: Iterable[str]) -> Candidate:
        kept = set(nodes)
        todo = list(kept)
        while todo:
            for a in args.get(todo.pop(), ()):
                if a in args and a not in kept and a not in cuttable:
                    kept.add(a)
                    todo.append(a)
        return frozenset(kept)

    return closure


def smallest_failure_known(candidates: Sequence[Candidate], verdicts: Mapping[Candidate, str]) -> bool:
    """The candidate the round would take (the smallest failing one, the earliest among equals) is known: a
    round tested concurrently may end. Waiting for a smaller one costs one small compile; taking the first to
    fail cost whole rounds on the H200, where a 4-node slice whose kernels were cached beat the 1-node slice
    compiling beside it. Waiting for an earlier one of the same size makes the result the same on every run,
    whichever worker is faster: with two accuracy bugs, PyTorch's --strict-accuracy test expects the first."""
    for candidate in sorted(candidates, key=len):
        if candidate not in verdicts:
            return False
        if verdicts[candidate] == "fails":
            return True
    return False


def minimize(space: Space, start: Candidate, oracle: Oracle, *, max_granularity: int | None = None) -> Candidate:
    current = start
    n = 2 if not max_granularity else max(2, math.ceil(len(current) / max_granularity))
    while len(current) >= 2:
        n = min(n, len(current))
        chunks = [space.closure(c) for c in _split(space.ordered(current), n)]
        complements = [space.closure(current - c) for c in chunks] if n > 2 else []
        candidates = _distinct([c for c in chunks + complements if len(c) < len(current)])
        hit = oracle.first_failing(candidates)
        if hit is None:
            if n >= len(current):
                break
            n = min(2 * n, len(current))
            continue
        n = 2 if hit in chunks else max(n - 1, 2)
        current = hit
    return current


def _split(items: list[str], n: int) -> list[Candidate]:
    size, extra = divmod(len(items), n)
    chunks, at = [], 0
    for i in range(n):
        width = size + (1 if i < extra else 0)
        chunks.append(frozenset(items[at:at + width]))
        at += width
    return [c for c in chunks if c]


def _distinct(candidates: list[Candidate]) -> list[Candidate]:
    seen: list[Candidate] = []
    for c in sorted(candidates, key=len):
        if c and c not in seen:
            seen.append(c)
    return seen
