"""Shared fixtures: real AOTI failures dumped by PyTorch itself (CPU, g++), made once per session.

Each fixture returns a fresh copy of a pristine dump, so tests may write into it freely.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from minifier.events import DoneEvent, parse_event
from minifier.artifacts import relocate_dump
from minifier.procs import WORKER_NAME
from minifier.signature import Signature, analyze_error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config, items):
    cuda = False
    if HAS_TORCH and any("gpu" in item.keywords for item in items):
        import torch

        cuda = torch.cuda.is_available()
    for item in items:
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs CUDA"))


def make_dump(out: str, model: str = "seed", bug: str = "compile_error", device: str = "cpu", blocks: int = 6) -> str:
    """Run the example model with Inductor's injected bug; PyTorch writes the launcher. Returns its path."""
    proc = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", out, "--model", model, "--bug", bug,
         "--device", device, "--blocks", str(blocks)],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def aoti_minify(*args: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minifier", *args], capture_output=True, text=True,
                          cwd=kwargs.pop("cwd", ROOT), timeout=timeout, **kwargs)


def events_of(proc: subprocess.CompletedProcess | str) -> list:
    text = proc if isinstance(proc, str) else proc.stdout
    return [parse_event(line) for line in text.splitlines() if line.startswith("{")]


def repro_signature(repro: str) -> Signature:
    """Run repro.py with plain torch in a fresh process; the signature of what it raises."""
    proc = subprocess.run([sys.executable, repro], capture_output=True, text=True, cwd=os.path.dirname(repro),
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, timeout=600)
    assert proc.returncode != 0, "repro.py ran without error"
    imports = re.findall(r"^\s*(?:import|from) (\S+)", open(repro).read(), re.M)
    assert all(name.split(".")[0] in ("os", "torch") for name in imports), imports
    last = re.findall(r"^([\w.]+(?:Error|Exception)): ", proc.stderr, re.M)
    exc_type = last[-1] if last else "Error"
    return analyze_error(exc_type.rsplit(".", 1)[-1], proc.stderr[proc.stderr.rfind(exc_type):]).signature


def workers_in(folder: str) -> list[int]:
    """Worker processes running in a dump's folder (their cwd is its scratch folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(folder) and open(
                    f"/proc/{pid}/comm").read().strip() == WORKER_NAME:
                found.append(int(pid))
        except OSError:
            continue
    return found


def minify(launcher: str, *extra: str) -> tuple[subprocess.CompletedProcess, DoneEvent]:
    proc = aoti_minify("minify", launcher, "--events", "--workers", "2", *extra)
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = events_of(proc)[-1]
    assert isinstance(done, DoneEvent)
    return proc, done


class DumpFactory:
    """Makes each kind of dump once per session and hands out copies."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.pristine: dict[tuple, str] = {}

    def get(self, dest: str, model: str = "seed", bug: str = "compile_error", blocks: int = 6,
            reproduced: bool = False, device: str = "cpu") -> str:
        key = (model, bug, blocks, reproduced, device)
        if key not in self.pristine:
            out = os.path.join(self.base, "-".join(map(str, key)))
            if reproduced:
                launcher = self.get(out, model, bug, blocks, device=device)
                proc = aoti_minify("run", launcher)
                assert proc.returncode == 0, proc.stderr[-4000:]
            else:
                launcher = make_dump(out, model, bug, device, blocks)
            self.pristine[key] = launcher
        return relocate_dump(self.pristine[key], dest)


@pytest.fixture(scope="session")
def dumps(tmp_path_factory) -> DumpFactory:
    if not HAS_TORCH:
        pytest.skip("needs torch")
    return DumpFactory(str(tmp_path_factory.mktemp("dumps")))
