"""Shared fixtures: real AOTI failures dumped by PyTorch itself (CPU, g++), made once per session.

Each fixture returns a fresh copy of a pristine dump, so tests may write into it freely.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from minifier.artifacts import relocate_dump
from minifier.events import DoneEvent, parse_event
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


def make_dump(
    out: str,
    model: str = "seed",
    bug: str = "compile_error",
    device: str = "cpu",
    blocks: int = 6,
    workload: str | None = None,
    repro_level: int | None = None,
) -> str:
    """Run the example model with Inductor's injected bug (or a workload of minifier/examples/workloads.py);
    PyTorch writes the launcher (at repro level 1, OUT/repro.py). Returns its path."""
    choice = (
        ["--workload", workload]
        if workload
        else ["--model", model, "--bug", bug, "--device", device, "--blocks", str(blocks)]
    )
    level = ["--repro-level", str(repro_level)] if repro_level else []
    proc = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", out, *choice, *level],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def aoti_minify(*args: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minifier", *args],
        capture_output=True,
        text=True,
        cwd=kwargs.pop("cwd", ROOT),
        timeout=timeout,
        **kwargs,
    )


def events_of(proc: subprocess.CompletedProcess | str) -> list:
    text = proc if isinstance(proc, str) else proc.stdout
    return [parse_event(line) for line in text.splitlines() if line.startswith("{")]


def repro_signature(repro: str, allowed: tuple[str, ...] = ("os", "torch")) -> Signature:
    """Run repro.py (or repro_standalone.py) with plain torch in a fresh process, in its own folder; the
    signature of what it raises. It may import only `allowed` (and the stdlib modules a standalone uses)."""
    proc = subprocess.run(
        [sys.executable, repro],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(repro),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=600,
    )
    assert proc.returncode != 0, f"{repro} ran without error"
    imports = re.findall(r"^\s*(?:import|from) (\S+)", open(repro).read(), re.M)
    stdlib = ("base64", "math")
    assert all(name.split(".")[0] in (*allowed, *stdlib) or name in allowed for name in imports), imports
    last = re.findall(r"^([\w.]+(?:Error|Exception)): ", proc.stderr, re.M)
    exc_type = last[-1] if last else "Error"
    return analyze_error(exc_type.rsplit(".", 1)[-1], proc.stderr[proc.stderr.rfind(exc_type) :]).signature


def program_facts(pt2: str, *imports: str) -> dict:
    """Placeholder sizes and range constraints of a saved program, read in a fresh process."""
    code = (
        f"import json, torch\n{''.join(f'import {m}' + chr(10) for m in imports)}"
        f"ep = torch.export.load({pt2!r})\n"
        "sizes = [[str(s) for s in n.meta['val'].shape] for n in ep.graph.nodes if n.op == 'placeholder'"
        " and hasattr(n.meta.get('val'), 'shape')]\n"
        "ranges = {str(k): [int(v.lower), int(v.upper) if v.upper.is_finite else None]"
        " for k, v in ep.range_constraints.items()}\n"
        "print(json.dumps({'sizes': sizes, 'ranges': ranges}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def workers_in(folder: str) -> list[int]:
    """Worker processes running in a dump's folder (their cwd is its scratch folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (
                os.readlink(f"/proc/{pid}/cwd").startswith(folder)
                and open(f"/proc/{pid}/comm").read().strip() == WORKER_NAME
            ):
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

    def get(
        self,
        dest: str,
        model: str = "seed",
        bug: str = "compile_error",
        blocks: int = 6,
        reproduced: bool = False,
        device: str = "cpu",
        workload: str | None = None,
        repro_level: int | None = None,
    ) -> str:
        key = (model, bug, blocks, reproduced, device, workload, repro_level)
        if key not in self.pristine:
            out = os.path.join(self.base, "-".join(map(str, key)))
            if reproduced:
                launcher = self.get(out, model, bug, blocks, device=device, workload=workload, repro_level=repro_level)
                proc = aoti_minify("run", launcher)
                assert proc.returncode == 0, proc.stderr[-4000:]
            else:
                launcher = make_dump(out, model, bug, device, blocks, workload, repro_level)
            self.pristine[key] = launcher
        return relocate_dump(self.pristine[key], dest)


@pytest.fixture(scope="session")
def dumps(tmp_path_factory) -> DumpFactory:
    if not HAS_TORCH:
        pytest.skip("needs torch")
    return DumpFactory(str(tmp_path_factory.mktemp("dumps")))
