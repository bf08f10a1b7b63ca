"""`aoti-minify capture -- <command>`: catch failures PyTorch cannot dump on its own.

A device-side assert or an illegal memory access poisons the process's CUDA context, and PyTorch's dump after the
failure then dies copying weights off the GPU, leaving a corrupt .pt2. Under capture, PyTorch also dumps every AOTI
compile *before* compiling (AOTINDUCTOR_REPRO_LEVEL=3, or 4 for accuracy); capture snapshots each dump as it
appears, before the failing compile can overwrite it, then reproduces every snapshot in an isolated worker.
For torch.compile (`--compiler torch.compile`), its after_aot dump before each compiled graph runs (repro level 3,
or 4 for accuracy). That level dumps no compile error, and its dump switch breaks AOTI compiles in the same
process (torch 2.13: `compile_fx_aot` asserts), so one capture turns on one compiler's dumps. A dump
of the same program again (PyTorch's own dump after the failure, with the config as it was then) replaces its
earlier snapshot instead of adding one. Each snapshot's events log starts with a `capture` begin event at once, so
that an editor shows it as being worked on, not as a new failure to reproduce itself.
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import time
from dataclasses import dataclass, field

from ..contract.artifacts import relocate_dump
from ..contract.launcher import BadLauncher, read_launcher
from ..contract.layout import CAPTURE_SUFFIX, DumpLayout, capture_name, launcher_glob, run_folder
from ..contract.procs import exit_text
from .reporter import append_events, begin_event

POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Captured:
    exit_status: str
    launchers: list[str]


def capture(command: list[str], debug_dir: str, accuracy: bool, compiler: str = "aoti") -> Captured:
    debug_dir = os.path.abspath(debug_dir)
    level = "4" if accuracy else "3"
    dumps = (
        {"TORCHDYNAMO_REPRO_AFTER": "aot", "TORCHDYNAMO_REPRO_LEVEL": level}
        if compiler == "torch.compile"
        else {"DUMP_AOTI_MINIFIER": "1", "AOTINDUCTOR_REPRO_LEVEL": level}
    )
    env = dict(os.environ, **dumps, TORCH_COMPILE_DEBUG_DIR=debug_dir)
    started = time.time()
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as e:
        raise ValueError(f"cannot run {command[0]!r}: {e.strerror}") from e
    snapshots = Snapshots(debug_dir, started)
    while proc.poll() is None:
        snapshots.take_new()
        time.sleep(POLL_SECONDS)
    snapshots.take_new()
    return Captured(exit_status=exit_text(proc.returncode), launchers=list(snapshots.taken.values()))


@dataclass
class Snapshots:
    debug_dir: str
    started: float
    seen: set[tuple[str, int]] = field(default_factory=set)
    taken: dict[tuple[str, str], str] = field(default_factory=dict)  # (source launcher, program hash) -> snapshot

    def take_new(self) -> None:
        """PyTorch writes the launcher after its .pt2, so a launcher on disk means a complete dump."""
        for launcher in sorted(glob.glob(launcher_glob(self.debug_dir))):
            if CAPTURE_SUFFIX in DumpLayout.of(launcher).run_name:
                continue
            try:
                mtime = os.stat(launcher).st_mtime_ns
            except OSError:
                continue
            if mtime < (self.started - 1) * 1e9 or (launcher, mtime) in self.seen:
                continue
            self.seen.add((launcher, mtime))
            self._take(launcher)

    def _take(self, launcher: str) -> None:
        key = (launcher, _program_hash(launcher))
        layout = DumpLayout.of(launcher)
        name = (
            DumpLayout.of(self.taken[key]).run_name
            if key in self.taken
            else capture_name(layout.run_name, len(self.taken) + 1)
        )
        target = os.path.join(run_folder(self.debug_dir, name), os.path.relpath(layout.launcher, layout.run_dir))
        if key not in self.taken:  # before the launcher appears there, so that an editor never sees it unclaimed
            append_events(DumpLayout.of(target).events_log, [begin_event("capture", target)])
        try:
            self.taken[key] = relocate_dump(launcher, self.debug_dir, name)
        except OSError:
            return  # the dump is being rewritten right now; the next poll sees its new version


def _program_hash(launcher: str) -> str:
    """The dumped program's bytes: two dumps of one compile hold the same program (a torch.compile launcher holds
    it as code, which names the folder it was written in)."""
    try:
        spec = read_launcher(launcher, require_pt2=False)
        if spec.traced:
            with open(launcher, encoding="utf-8") as f:
                return hashlib.sha256(f.read().replace(spec.save_dir or "", "").encode()).hexdigest()
        with open(spec.pt2, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except (BadLauncher, OSError, UnicodeDecodeError):
        return f"unreadable:{launcher}:{time.monotonic_ns()}"
