"""Shared fixtures: real AOTI failures dumped by PyTorch itself (CPU, g++), made once per session.

Each fixture returns a fresh copy of a pristine dump, so tests may write into it freely.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

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


class DumpFactory:
    """Makes each kind of dump once per session and hands out copies."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.pristine: dict[tuple, str] = {}

    def get(self, dest: str, model: str = "seed", bug: str = "compile_error", blocks: int = 6,
            reproduced: bool = False) -> str:
        key = (model, bug, blocks, reproduced)
        if key not in self.pristine:
            out = os.path.join(self.base, "-".join(map(str, key)))
            if reproduced:
                launcher = self.get(out, model, bug, blocks)
                proc = aoti_minify("run", launcher)
                assert proc.returncode == 0, proc.stderr[-4000:]
            else:
                launcher = make_dump(out, model, bug, blocks=blocks)
            self.pristine[key] = launcher
        return copy_dump(self.pristine[key], dest)


def copy_dump(launcher: str, dest: str) -> str:
    """Copy the whole torch_compile_debug tree under `dest`; the launcher's .pt2 path is absolute, so
    the copy's launcher is rewritten to point at its own checkpoints/exported_program.pt2."""
    run_dir = os.path.dirname(os.path.dirname(launcher))
    target = os.path.join(dest, "torch_compile_debug", os.path.basename(run_dir))
    shutil.copytree(run_dir, target, dirs_exist_ok=True)
    copied = os.path.join(target, "minifier", "minifier_launcher.py")
    with open(copied, encoding="utf-8") as f:
        text = f.read()
    with open(copied, "w", encoding="utf-8") as f:
        f.write(text.replace(os.path.dirname(os.path.dirname(launcher)), target))
    return copied


@pytest.fixture(scope="session")
def dumps(tmp_path_factory) -> DumpFactory:
    if not HAS_TORCH:
        pytest.skip("needs torch")
    return DumpFactory(str(tmp_path_factory.mktemp("dumps")))
