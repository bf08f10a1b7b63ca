"""Shared fixtures: real AOTI failures dumped by PyTorch itself (CPU, g++), made once per session.

Each fixture returns a fresh copy of a pristine dump, so tests may write into it freely.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping

import pytest

from minifier.contract.artifacts import relocate_dump
from minifier.contract.events import DoneEvent, LogEvent, StandaloneEvent, parse_event
from minifier.contract.procs import WORKER_NAME
from minifier.contract.signature import Signature, script_signature

# Inductor's own knob, read when it is imported: the tests' AOTI wrappers are built at -O0, which cuts the g++ time
# that most of the suite's time is by about a fifth; no verdict a test checks depends on the wrapper's optimization.
os.environ.setdefault("AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL", "O0")
# and without line tables (-g1), which cost a sixth of the wrapper's g++ time; nothing here reads them
os.environ.setdefault("AOT_INDUCTOR_ENABLE_LINE_TABLES", "0")

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
    # the longest first: pytest-xdist hands tests out in this order, and one started last would end the run alone
    items.sort(key=lambda item: "slow" not in item.keywords)


def make_dump(
    out: str,
    model: str = "seed",
    bug: str = "compile_error",
    device: str = "cpu",
    blocks: int = 6,
    workload: str | None = None,
    repro_level: int | None = None,
    compiler: str = "aoti",
    repro_after: str = "aot",
) -> str:
    """Run the example model with Inductor's injected bug (or a workload of minifier/examples/workloads.py),
    compiled by AOTI or torch.compile; PyTorch writes the launcher (at repro level 1, OUT/repro.py). Returns its
    path."""
    choice = (
        ["--workload", workload]
        if workload
        else ["--model", model, "--bug", bug, "--device", device, "--blocks", str(blocks)]
    )
    level = ["--repro-level", str(repro_level)] if repro_level else []
    compile_with = ["--compiler", compiler, "--repro-after", repro_after]
    proc = _DUMP_SERVER.dump(["--out", out, *choice, *level, *compile_with])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


class DumpServer:
    """`python -m minifier.examples.dump --serve`, started at this process's first dump: each dump's compile is
    forked from one process that imported torch and Inductor, where a fresh interpreter would import them again
    (most of a small dump's time). A dump asked for in another environment (a test's own variables, which
    Inductor may read at import) runs in a fresh `python -m minifier.examples.dump` as before."""

    COMMAND = (sys.executable, "-m", "minifier.examples.dump")

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.env: dict[str, str] = {}

    def dump(self, args: list[str]) -> subprocess.CompletedProcess:
        env = child_env()
        if self.proc is None:
            self.env = env
            self.proc = subprocess.Popen(
                [*self.COMMAND, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if env != self.env or self.proc.poll() is not None:
            return subprocess.run([*self.COMMAND, *args], capture_output=True, text=True, cwd=ROOT, timeout=900)
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline() or '{"code": 1, "stdout": "", "stderr": "the server ended"}')
        return subprocess.CompletedProcess([*self.COMMAND, *args], reply["code"], reply["stdout"], reply["stderr"])


_DUMP_SERVER = DumpServer()


# `run` and `minify` keep their workers' fork server warm for the next one, as the language server's do: it
# outlives each run by this long at most, never the test session (its owner: pytest-xdist's controller, so that
# its workers share it), and it is shared by the runs with the same environment, so torch and Inductor are
# imported once, not once a run.
SESSION = str(os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid())
KEEP_WARM = ("--keep-warm", "600", "--owner", SESSION)
# pytest's variables naming the current test and the xdist worker: a warm fork server is shared only by runs
# whose environments are the same
_PER_TEST = ("PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER")


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child the tests start, without pytest's variables of the test and worker."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in _PER_TEST}


def aoti_minify(*args: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    """`aoti-minify ARGS`, run, minify and triage with KEEP_WARM unless ARGS say how long to keep warm (the tests of a
    cold start or of the fork server's own life start their drivers themselves)."""
    keep_warm = KEEP_WARM if args[:1] in (("run",), ("minify",), ("triage",)) and "--keep-warm" not in args else ()
    return subprocess.run(
        [sys.executable, "-m", "minifier", *args, *keep_warm],
        capture_output=True,
        text=True,
        cwd=kwargs.pop("cwd", ROOT),
        timeout=timeout,
        env=child_env(kwargs.pop("env", None)),
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
    signature = script_signature(proc.stderr)
    assert signature is not None, proc.stderr[-3000:]
    return signature


def program_facts(pt2: str, *imports: str) -> dict:
    """Placeholder sizes, input kinds and range constraints of a saved program, read in a fresh process."""
    [facts] = programs_facts([pt2], *imports)
    return facts


def programs_facts(pt2s: list[str], *imports: str) -> list[dict]:
    """program_facts of several programs, read in one fresh process."""
    code = (
        f"import json, torch\n{''.join(f'import {m}' + chr(10) for m in imports)}"
        f"for path in {pt2s!r}:\n"
        "    ep = torch.export.load(path)\n"
        "    sizes = [[str(s) for s in n.meta['val'].shape] for n in ep.graph.nodes if n.op == 'placeholder'"
        " and hasattr(n.meta.get('val'), 'shape')]\n"
        "    bound = lambda b: int(b) if b.is_Integer else None\n"  # int_oo says it is finite
        "    ranges = {str(k): [bound(v.lower), bound(v.upper)] for k, v in ep.range_constraints.items()}\n"
        "    kinds = [s.kind.name for s in ep.graph_signature.input_specs]\n"
        "    print(json.dumps({'sizes': sizes, 'ranges': ranges, 'kinds': kinds}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()[-len(pt2s) :]]


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
    return proc, done_of(events_of(proc))


def done_of(events: list) -> DoneEvent:
    """A minify's `done`, followed by nothing but its `standalone` event (and logs)."""
    done = next(i for i, e in enumerate(events) if isinstance(e, DoneEvent))
    assert isinstance(events[-1], StandaloneEvent) and all(
        isinstance(e, StandaloneEvent | LogEvent) for e in events[done + 1 :]
    ), events[done:]
    return events[done]


class DumpFactory:
    """Makes each kind of dump once per test run and hands out copies: as PyTorch dumped it, `reproduced` (after
    `aoti-minify run`) or `minified` (after `run` and `minify`). The pristine dumps live in a folder that
    every pytest-xdist worker of the run shares; a lock file per kind makes one worker dump it while the
    others wait for it."""

    def __init__(self, base: str) -> None:
        self.base = base
        os.makedirs(base, exist_ok=True)

    def get(
        self,
        dest: str,
        model: str = "seed",
        bug: str = "compile_error",
        blocks: int = 6,
        reproduced: bool = False,
        minified: bool = False,
        device: str = "cpu",
        workload: str | None = None,
        repro_level: int | None = None,
        compiler: str = "aoti",
        repro_after: str = "aot",
    ) -> str:
        key = (model, bug, blocks, reproduced, minified, device, workload, repro_level, compiler, repro_after)
        out = os.path.join(self.base, "-".join(map(str, key)))
        made = out + ".launcher"  # the pristine launcher's path, written once the dump is whole
        with open(out + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(made):
                kind = dict(
                    device=device,
                    workload=workload,
                    repro_level=repro_level,
                    compiler=compiler,
                    repro_after=repro_after,
                )
                if minified:  # `run`, then `minify`, as a user does
                    launcher = self.get(out, model, bug, blocks, reproduced=True, **kind)
                    proc = aoti_minify("minify", launcher, "--workers", "2")
                    assert proc.returncode == 0, proc.stderr[-4000:]
                elif reproduced:
                    launcher = self.get(out, model, bug, blocks, **kind)
                    proc = aoti_minify("run", launcher)
                    assert proc.returncode == 0, proc.stderr[-4000:]
                else:
                    launcher = make_dump(out, model, bug, device, blocks, workload, repro_level, compiler, repro_after)
                with open(made, "w") as f:
                    f.write(launcher)
            with open(made) as f:
                return relocate_dump(f.read(), dest)


@pytest.fixture(scope="session")
def dumps(tmp_path_factory) -> DumpFactory:
    if not HAS_TORCH:
        pytest.skip("needs torch")
    # with pytest-xdist, getbasetemp() is this worker's folder inside the run's; without it, the run's
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return DumpFactory(str(shared / "dumps"))
