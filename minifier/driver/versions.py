"""`aoti-minify versions DUMP`: which torch releases have the minimized failure, from wheels (cargo-bisect-rustc's
way, not a source build): the repro run under the newest release, then a binary search (bisect.py), each release
in an environment of its own (releases.py). versions.json beside repro.py; report.md's Releases line reads it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..contract import wire
from ..contract.artifacts import rebuilt_standalone, write_text
from ..contract.events import DoneEvent, EventsTail, Versions, last_run, load_failure
from ..contract.launcher import read_launcher, runnable_original
from ..contract.layout import DumpLayout
from ..contract.signature import Signature
from .bisect import Bisection, bisect_releases
from .releases import Environments, ReleaseProber, Sources, latest_patches, releases_in, releases_on_pypi, version_key

ENVIRONMENTS = os.path.join(os.path.expanduser("~"), ".cache", "aoti-lens", "torch-envs")


class CannotCheck(ValueError):
    """Nothing to check: no minimal repro, no failure to look for, or no list of releases."""


@dataclass(frozen=True)
class VersionsOptions:
    releases: list[str]  # to run, every one of them; empty: bisect the default set
    sources: Sources
    timeout: float = 600.0
    environments: str = ENVIRONMENTS


def check_versions(launcher: str, options: VersionsOptions, say=print) -> Versions:
    spec = read_launcher(launcher, require_pt2=False)
    layout = spec.layout()
    script = rebuilt_standalone(layout) or (layout.repro_py if os.path.isfile(layout.repro_py) else None)
    if script is None:
        raise CannotCheck(f"{layout.root} has no repro.py yet: run `aoti-minify minify {spec.path}` first")
    target, device = _target(layout)
    prober = ReleaseProber(
        Environments(os.path.join(options.environments, device), options.sources), script, target, options.timeout
    )

    def probe(release: str):
        say(f"torch {release}: installing and running {os.path.basename(script)}")
        run = prober(release)
        say(f"torch {release}: {run.verdict.replace('_', ' ')} ({run.detail}, {run.seconds:.0f} s)")
        return run

    if options.releases:
        found = Bisection(runs=[probe(r) for r in sorted(options.releases, key=version_key)])
    else:
        found = bisect_releases(_default_releases(options.sources), spec.torch_version, probe, version_key)
    original = None
    upgrade = upgrade_release(found, spec.torch_version)
    if upgrade is not None:
        say(f"torch {upgrade}: running the original program, to check upgrading as a workaround")
        original = prober.original(upgrade, runnable_original(spec))
        say(f"torch {upgrade}: the original {original.verdict.replace('_', ' ')} ({original.detail})")
    versions = Versions(
        signature=target,
        script=script,
        device=device,
        runs=found.runs,
        first_bad=found.first_bad,
        last_good=found.last_good,
        fixed_in=found.fixed_in,
        torch_version=spec.torch_version or "",
        original=original,
    )
    write_text(layout.versions_json, wire.dumps(versions))
    return versions


def upgrade_release(found: Bisection, own: str | None) -> str | None:
    """The newest release newer than the dump's own where the repro passes: the release to upgrade to."""
    passing = [r.release for r in found.runs if r.verdict == "passes"]
    newer = [r for r in passing if own is None or version_key(r) > version_key(own)]
    return max(newer, key=version_key, default=None)


def _target(layout: DumpLayout) -> tuple[Signature, str]:
    """The failure each release is checked for, and the dump's device (the build to install)."""
    try:
        failure = load_failure(layout.failure_json)
        return failure.signature, "cuda" if failure.device.startswith("cuda") else "cpu"
    except (OSError, ValueError):
        pass
    done = [e for e in last_run(EventsTail(layout.events_log).read().events) if isinstance(e, DoneEvent)]
    if done and done[-1].signature is not None:
        return done[-1].signature, "cpu"
    raise CannotCheck(f"{layout.root}: no failure.json nor a minify's end to say which failure to look for")


def _default_releases(sources: Sources) -> list[str]:
    """The newest patch of each minor release from 2.9: from the wheel folder offline, else from PyPI."""
    if sources.offline:
        return latest_patches(releases_in(sources.find_links or ""))
    try:
        return latest_patches(releases_on_pypi())
    except (OSError, ValueError, KeyError) as e:
        local = releases_in(sources.find_links or "")
        if local:
            return latest_patches(local)
        raise CannotCheck(f"cannot list torch's releases ({e}): name them with --releases, or a wheel folder") from e
