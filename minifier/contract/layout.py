"""Where everything of one PyTorch AOTI dump lives, and what aoti-lens writes beside it.

    <root>/torch_compile_debug/                  DEBUG_DIR: PyTorch's debug_dir_root
      run_<time>-pid_<pid>/                      a run folder
        minifier/                                the minifier folder, written by PyTorch:
          minifier_launcher.py                     the launcher
          checkpoints/exported_program.pt2         the failing program
                                                 and by aoti-minify (the outputs):
          failure.json                             `run`: what failed, and where
          checkpoints/<N>.py + <N>.pt2             `minify`: each smaller failing graph
          repro.py + repro.pt2                     `minify`: the last checkpoint
          repro_standalone.py                      `minify`: the same graph as plain PyTorch code
          triage.json                              `triage`: a verified workaround and the culprit
          versions.json                            `versions`: which torch releases have the failure
          report.md                                `report`: a PyTorch bug report of the repro
          aoti-lens-work/                          scratch: worker logs, values.pt, candidates/, packages/, caches/
            events.jsonl                             every run's events, appended (the editor tails it)
            lock                                     which run works on the dump now (minifier.contract.lock)
      run_<time>-pid_<pid>.capture<N>/           `capture`: a snapshot of that run folder's dump

    <folder>/repro.py                            any other launcher: PyTorch's level-1 repro.py (in the
    <folder>/repro.minified/                     cwd), a checkpoint or repro.py of ours; its outputs go
                                                 into a folder named after it, so the input is never overwritten

Outputs go where the dump is now. PyTorch's launcher names its save_dir (and .pt2) by absolute path,
which is wrong once the dump is moved or copied from another machine: that path is never written to.
Paths only, no file is touched: the CLI, capture and the language server all name these files here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEBUG_DIR = "torch_compile_debug"
RUN_PREFIX = "run_"
RUN_GLOB = f"{DEBUG_DIR}/{RUN_PREFIX}*"
MINIFIER = "minifier"
LAUNCHER = "minifier_launcher.py"
CHECKPOINTS = "checkpoints"
EXPORTED_PROGRAM = "exported_program.pt2"
FAILURE_JSON = "failure.json"
REPRO_PY = "repro.py"
REPRO_STANDALONE = "repro_standalone.py"  # the graph as plain PyTorch code; report.md prefers it
REPORT_MD = "report.md"
TRIAGE_JSON = "triage.json"
VERSIONS_JSON = "versions.json"
EVENTS_LOG = "events.jsonl"
CAPTURE_SUFFIX = ".capture"
MINIFIED = ".minified"  # suffix of the output folder of a launcher not named LAUNCHER
SCRATCH = "aoti-lens-work"
PACKAGES = "packages"  # inside SCRATCH: the workers' compiled candidates, each removed once it has run
CACHES = "caches"  # inside SCRATCH: the Inductor caches of queries compiled in one of their own, each removed after
LOCK = "lock"  # inside SCRATCH
_CHECKPOINT = re.compile(r"(\d+)\.py")


@dataclass(frozen=True)
class DumpLayout:
    launcher: str
    root: str  # where the outputs go
    checkpoints: str

    @classmethod
    def of(cls, launcher: str, output_dir: str | None = None, save_dir: str | None = None) -> DumpLayout:
        """The dump of `launcher`. Outputs go beside a minifier_launcher.py, into `<name>.minified/` beside
        any other launcher, or into `output_dir`; checkpoints into `save_dir`, else beside the other outputs."""
        launcher = os.path.abspath(launcher)
        folder, name = os.path.split(launcher)
        default = folder if name == LAUNCHER else os.path.join(folder, os.path.splitext(name)[0] + MINIFIED)
        root = os.path.abspath(output_dir or default)
        return cls(
            launcher=launcher, root=root, checkpoints=os.path.abspath(save_dir or os.path.join(root, CHECKPOINTS))
        )

    def outputs(self) -> list[str]:
        """The files a run or minify writes outside its scratch folder (checkpoints aside)."""
        return [self.failure_json, self.repro_py, self.repro_pt2, self.repro_standalone]

    @property
    def minifier_dir(self) -> str:
        return os.path.dirname(self.launcher)

    @property
    def in_run_folder(self) -> bool:
        """False for a launcher outside PyTorch's `run_*/minifier/` (a level-1 repro.py, say)."""
        return os.path.basename(self.minifier_dir) == MINIFIER

    @property
    def run_dir(self) -> str:
        return os.path.dirname(self.minifier_dir)

    @property
    def run_name(self) -> str:
        return os.path.basename(self.run_dir)

    @property
    def exported_program(self) -> str:
        """Where PyTorch dumps the program, should the launcher's absolute path to it be stale."""
        return os.path.join(self.minifier_dir, CHECKPOINTS, EXPORTED_PROGRAM)

    @property
    def failure_json(self) -> str:
        return os.path.join(self.root, FAILURE_JSON)

    @property
    def repro_py(self) -> str:
        return os.path.join(self.root, REPRO_PY)

    @property
    def repro_pt2(self) -> str:
        return program_of(self.repro_py)

    @property
    def repro_standalone(self) -> str:
        return os.path.join(self.root, REPRO_STANDALONE)

    @property
    def triage_json(self) -> str:
        return os.path.join(self.root, TRIAGE_JSON)

    @property
    def versions_json(self) -> str:
        return os.path.join(self.root, VERSIONS_JSON)

    @property
    def report_md(self) -> str:
        return os.path.join(self.root, REPORT_MD)

    @property
    def work(self) -> str:
        return os.path.join(self.root, SCRATCH)

    @property
    def events_log(self) -> str:
        """Where every `run`, `minify` and `capture` of this dump appends its events, for an editor that
        did not start it (the language server tails it)."""
        return os.path.join(self.work, EVENTS_LOG)

    @property
    def lock(self) -> str:
        return os.path.join(self.work, LOCK)

    @property
    def packages(self) -> str:
        return os.path.join(self.work, PACKAGES)

    @property
    def caches(self) -> str:
        return os.path.join(self.work, CACHES)

    @property
    def values(self) -> str:
        return os.path.join(self.work, "values.pt")

    @property
    def candidates(self) -> str:
        return os.path.join(self.work, "candidates")

    def checkpoint_py(self, nodes: int) -> str:
        return os.path.join(self.checkpoints, f"{nodes}.py")


def program_of(script: str) -> str:
    """The .pt2 that a checkpoint or repro.py loads: its own, beside it."""
    return os.path.splitext(script)[0] + ".pt2"


def checkpoint_nodes(name: str) -> int | None:
    """The node count in a checkpoint's file name (`12.py`), None for any other file."""
    found = _CHECKPOINT.fullmatch(name)
    return int(found[1]) if found else None


def launcher_in(folder: str) -> str | None:
    """The launcher of a run folder or of a minifier folder."""
    for candidate in (os.path.join(folder, MINIFIER, LAUNCHER), os.path.join(folder, LAUNCHER)):
        if os.path.isfile(candidate):
            return candidate
    return None


def launchers_in(debug_dir: str) -> list[str]:
    """The launchers of the run folders in one torch_compile_debug folder, but for run folders that
    `capture` snapshotted: their snapshots stand for them."""
    try:
        runs = [r for r in os.listdir(debug_dir) if r.startswith(RUN_PREFIX)]
    except OSError:
        return []
    captured = {r.partition(CAPTURE_SUFFIX)[0] for r in runs if CAPTURE_SUFFIX in r}
    return [
        p
        for p in (os.path.join(debug_dir, r, MINIFIER, LAUNCHER) for r in runs if r not in captured)
        if os.path.isfile(p)
    ]


def captured(run_dir: str) -> bool:
    """Whether `capture` snapshotted this run folder: PyTorch may have overwritten its dump since (with
    a corrupt one after a device-side assert), and the snapshots hold every version of it."""
    parent, name = os.path.split(run_dir)
    try:
        return any(n.startswith(name + CAPTURE_SUFFIX) for n in os.listdir(parent))
    except OSError:
        return False


def capture_name(run_name: str, n: int) -> str:
    return f"{run_name}{CAPTURE_SUFFIX}{n}"


def launcher_glob(debug_root: str) -> str:
    """A glob for the launchers PyTorch dumps under a debug_dir_root."""
    return os.path.join(debug_root, DEBUG_DIR, f"{RUN_PREFIX}*", MINIFIER, LAUNCHER)


def launcher_for(path: str) -> str | None:
    """The launcher of the run folder that `path` lies in (or is)."""
    parts = Path(path).parts
    for i in range(len(parts) - 1):
        if parts[i] == DEBUG_DIR and parts[i + 1].startswith(RUN_PREFIX):
            return os.path.join(*parts[: i + 2], MINIFIER, LAUNCHER)
    return None


def run_folder(debug_root: str, name: str) -> str:
    return os.path.join(debug_root, DEBUG_DIR, name)
