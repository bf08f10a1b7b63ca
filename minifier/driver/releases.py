"""Other torch releases, each in an environment of its own, running a minimal repro (`aoti-minify versions`).

uv makes the environments (one per release and build, under ~/.cache/aoti-lens/torch-envs; its own cache shares the
wheels, so a second environment of a release costs hard links). Nothing is installed into the user's environment.
Each repro runs in a child process with a timeout, from a scratch copy of its folder, and gets a verdict: the same
failure, passes, another error, or cannot run (no wheel for this Python or platform, no network, a full disk).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from ..contract.events import ReleaseRun, ReleaseVerdict
from ..contract.procs import exit_text
from ..contract.signature import Signature, crash_signature, script_signature

PYPI_JSON = "https://pypi.org/pypi/torch/json"
OLDEST = (2, 9)  # the first release checked by default
_WHEEL = re.compile(r"^torch-(?P<version>\d+\.\d+\.\d+)(?:\+(?P<local>[\w.]+))?-")
_FINAL = re.compile(r"^\d+\.\d+\.\d+$")
# Runs a repro under a release that may lack some of the settings it assigns (the launcher wrote every non-default
# one its torch had): such an assignment is skipped and said, not an AttributeError that hides the bug.
_TOLERANT_SETTINGS = """
import runpy, sys
try:
    from torch.utils._config_module import ConfigModule
    assign = ConfigModule.__setattr__
    def tolerant(self, name, value):
        try:
            assign(self, name, value)
        except AttributeError as e:
            print(f"aoti-lens: skipped a setting this torch does not have: {e}", file=sys.stderr)
    ConfigModule.__setattr__ = tolerant
except ImportError:
    pass
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def version_key(release: str) -> tuple[int, ...]:
    """Orders releases (2.9.1 < 2.10.0); a local build's suffix (+cpu) does not count."""
    return tuple(int(part) for part in re.findall(r"\d+", release.split("+")[0])[:3])


def latest_patches(versions: list[str]) -> list[str]:
    """The newest patch release of each minor from OLDEST on, final releases only."""
    newest: dict[tuple[int, ...], str] = {}
    for version in versions:
        base = version.split("+")[0]
        if not _FINAL.match(base) or version_key(base)[:2] < OLDEST:
            continue
        minor = version_key(base)[:2]
        if minor not in newest or version_key(base) > version_key(newest[minor]):
            newest[minor] = base
    return sorted(newest.values(), key=version_key)


def releases_in(folder: str) -> list[str]:
    """The torch releases a wheel folder holds."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [m.group("version") for m in map(_WHEEL.match, names) if m]


def releases_on_pypi(timeout: float = 20.0) -> list[str]:
    """Every torch release PyPI lists (OSError without network)."""
    with urllib.request.urlopen(PYPI_JSON, timeout=timeout) as answer:
        return list(json.load(answer)["releases"])


@dataclass(frozen=True)
class Sources:
    """Where wheels come from: a folder of wheels (`find_links`, alone when `offline`), another index."""

    find_links: str | None = None
    index_url: str | None = None
    offline: bool = False

    def requirements(self, release: str) -> list[str]:
        """uv pip install's arguments for `release`: its wheel for this Python where the folder has one (a local
        build such as 2.13.0+cpu, which an index's release of the same number would otherwise shadow), torch's
        dependencies from the index unless offline."""
        torch = self._wheel(release) or f"torch=={release}"
        args = ["--find-links", self.find_links] if self.find_links else []
        args += ["--index-url", self.index_url] if self.index_url else []
        # setuptools: some releases import it at run time (2.10's C++ builder)
        return [torch, *(["--no-index"] if self.offline else ["numpy", "setuptools"]), *args]

    def _wheel(self, release: str) -> str | None:
        folder = self.find_links
        if not folder or not os.path.isdir(folder):
            return None
        tag = f"-cp{sys.version_info.major}{sys.version_info.minor}-"
        for name in sorted(os.listdir(folder)):
            found = _WHEEL.match(name)
            if found and found.group("version") == release and tag in name and name.endswith(".whl"):
                return os.path.join(folder, name)
        return None


class Environments:
    """One environment per release, made on first use and kept."""

    def __init__(self, root: str, sources: Sources, python: str = sys.executable, uv: str | None = None) -> None:
        self.root = root
        self.sources = sources
        self.python = python
        self.uv = uv or find_uv()

    def python_for(self, release: str) -> str:
        """The environment's interpreter; EnvironmentError(reason) where it cannot be made."""
        env = os.path.join(self.root, f"torch-{release}")
        python = os.path.join(env, "bin", "python")
        ready = os.path.join(env, ".aoti-lens-ready")  # holds what was installed: asked otherwise, it is made again
        wanted = self.sources.requirements(release)
        if _read(ready) == " ".join(wanted):
            return python
        if self.uv is None:
            raise OSError("uv is not installed (pip install uv): it makes the releases' environments")
        shutil.rmtree(env, ignore_errors=True)  # a half-made one from an interrupted run
        self._uv(["venv", "--quiet", "--python", self.python, env])
        self._uv(["pip", "install", "--quiet", "--python", python, *wanted])
        with open(ready, "w", encoding="utf-8") as f:
            f.write(" ".join(wanted))
        return python

    def _uv(self, args: list[str]) -> None:
        assert self.uv is not None
        proc = subprocess.run([self.uv, *args], capture_output=True, text=True, env={**os.environ, "UV_NO_CONFIG": "1"})
        if proc.returncode != 0:
            raise OSError(_last_lines(proc.stderr) or f"uv {args[0]} {exit_text(proc.returncode)}")


def find_uv() -> str | None:
    """uv on PATH, else the one the `uv` package installed beside this Python."""
    beside = os.path.join(os.path.dirname(sys.executable), "uv")
    return shutil.which("uv") or (beside if os.path.isfile(beside) else None)


def run_repro(python: str, script: str, target: Signature, timeout: float) -> tuple[ReleaseVerdict, str]:
    """Run `script` (repro.py or repro_standalone.py) with `python` from a scratch copy of its folder; its verdict
    against `target` and a detail."""
    with tempfile.TemporaryDirectory(prefix="aoti-lens-release-") as scratch:
        folder = os.path.join(scratch, "repro")
        shutil.copytree(os.path.dirname(script), folder, ignore=shutil.ignore_patterns("aoti-lens-work", "checkpoints"))
        return _run(python, os.path.join(folder, os.path.basename(script)), scratch, target, timeout)


def run_original(python: str, text: str, target: Signature, timeout: float) -> tuple[ReleaseVerdict, str]:
    """Run the original program with `python`: `text`, the launcher made to run it (launcher.runnable_original)."""
    with tempfile.TemporaryDirectory(prefix="aoti-lens-release-") as scratch:
        script = os.path.join(scratch, "original.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(text)
        return _run(python, script, scratch, target, timeout)


def _run(python: str, script: str, scratch: str, target: Signature, timeout: float) -> tuple[ReleaseVerdict, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "inductor-cache")  # nothing shared across releases
    try:
        proc = subprocess.run(
            [python, "-c", _TOLERANT_SETTINGS, os.path.basename(script)],
            cwd=os.path.dirname(script),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "other_error", f"no end within {timeout:g} s"
    skipped = proc.stderr.count("aoti-lens: skipped a setting")
    verdict, detail = _verdict(proc, target)
    return verdict, detail + (f"; {skipped} setting(s) this release lacks skipped" if skipped else "")


def _verdict(proc: subprocess.CompletedProcess, target: Signature) -> tuple[ReleaseVerdict, str]:
    if proc.returncode == 0:
        return "passes", "ran without error" + (" (matches eager)" if target.kind == "accuracy" else "")
    if proc.returncode < 0:
        found: Signature | None = crash_signature(exit_text(proc.returncode).removeprefix("killed by "))
    else:
        found = script_signature(proc.stderr)
    if found is None:
        return "other_error", _last_lines(proc.stderr) or exit_text(proc.returncode)
    if found.exc_type == "ModuleNotFoundError" and "torch" in found.message:
        return "cannot_run", found.describe()
    if found.matches(target):
        return "same_failure", found.describe()
    return "other_error", found.describe()


class ReleaseProber:
    """bisect.Prober over environments: each release installed (or found) and its run timed."""

    def __init__(self, environments: Environments, script: str, target: Signature, timeout: float) -> None:
        self.environments, self.script, self.target, self.timeout = environments, script, target, timeout

    def __call__(self, release: str) -> ReleaseRun:
        return self._timed(release, lambda python: run_repro(python, self.script, self.target, self.timeout))

    def original(self, release: str, text: str) -> ReleaseRun:
        """The original program (`text`: launcher.runnable_original) under `release`."""
        return self._timed(release, lambda python: run_original(python, text, self.target, self.timeout))

    def _timed(self, release: str, run: Callable[[str], tuple[ReleaseVerdict, str]]) -> ReleaseRun:
        started = time.monotonic()
        try:
            python = self.environments.python_for(release)
        except OSError as e:
            return ReleaseRun(release, "cannot_run", str(e), round(time.monotonic() - started, 1))
        verdict, detail = run(python)
        return ReleaseRun(release, verdict, detail, round(time.monotonic() - started, 1))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _last_lines(text: str, lines: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:])
