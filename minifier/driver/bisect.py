"""Which torch releases have a failure: the newest first, then a binary search for the release where its verdict
changes. Pure: the releases run behind the `Prober` protocol (releases.py runs them in environments of their own).

The dump's own torch fails (that is what was minified): a bound that is never run. One probe of the newest release
says which way to look:
- the newest fails the same way: back from the older of it and the dump's own for the release that broke it
  (`first_bad`, after `last_good`);
- the newest passes: forward from the dump's own release for the one that fixed it (`fixed_in`), and back from the
  dump's own for the one that broke it.
The verdicts are taken to change once each way, as `git bisect` takes them. A release that cannot run the repro, or
fails another way, says nothing about the bug: the search steps over it, as `git bisect skip` does. At most
log2(N) + 2 releases run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..contract.events import ReleaseRun


class Prober(Protocol):
    def __call__(self, release: str) -> ReleaseRun: ...


@dataclass
class Bisection:
    runs: list[ReleaseRun] = field(default_factory=list)  # in the order they ran
    first_bad: str | None = None  # the oldest release that fails the same way, newer ones all failing
    last_good: str | None = None  # the release just before it, passing
    fixed_in: str | None = None  # the oldest release newer than the dump's own that passes


def bisect_releases(
    releases: list[str], own: str | None, probe: Prober, key: Callable[[str], tuple[int, ...]]
) -> Bisection:
    """`releases` in any order; `own`: the dump's torch (it fails); `key` orders releases."""
    tried = sorted(set(releases), key=key)
    # the dump's own release among them, as a bound, where none of them is that release
    mine = own is not None and not any(key(r) == key(own) for r in tried)
    ordered = sorted([*tried, own], key=key) if mine and own is not None else tried
    found = Bisection()

    def run(release: str) -> str:
        result = probe(release)
        found.runs.append(result)
        return result.verdict

    newest = _first_telling([r for r in reversed(ordered) if not (mine and r == own)], run)
    if newest is None:
        return found
    at = ordered.index(newest)
    own_at = next((i for i, r in enumerate(ordered) if own is not None and key(r) == key(own)), None)
    if found.runs[-1].verdict == "passes":
        if own_at is None or own_at > at:
            return found  # nothing older fails that the search could start from
        _, found.fixed_in = _boundary(ordered, own_at, at, run, good_below=False)
        at = own_at
    elif own_at is not None:
        at = min(at, own_at)
    # below the oldest release, as if one passed: all failing ends at the oldest, with no last good
    found.last_good, found.first_bad = _boundary(ordered, -1, at, run, good_below=True)
    return found


def _first_telling(candidates: list[str], run: Callable[[str], str]) -> str | None:
    """The first of `candidates` whose verdict is the same failure or a pass."""
    for release in candidates:
        if run(release) in ("same_failure", "passes"):
            return release
    return None


def _boundary(
    ordered: list[str], low: int, high: int, run: Callable[[str], str], good_below: bool
) -> tuple[str | None, str]:
    """The adjacent pair (below, above) where the verdict flips between indices `low` and `high`, whose verdicts
    are known (-1: before the oldest): below passes and above fails (`good_below`), or below fails and above
    passes."""
    lower_verdict = "passes" if good_below else "same_failure"
    between = list(range(low + 1, high))
    while between:
        middle = between[len(between) // 2]
        verdict = run(ordered[middle])
        if verdict not in ("same_failure", "passes"):
            between.remove(middle)
            continue
        if verdict == lower_verdict:
            low, between = middle, [i for i in between if i > middle]
        else:
            high, between = middle, [i for i in between if i < middle]
    return (ordered[low] if low >= 0 else None), ordered[high]
