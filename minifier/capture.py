"""`aoti-minify capture -- <command>`: catch failures PyTorch cannot dump on its own.

A device-side assert or an illegal memory access poisons the process's CUDA context, and PyTorch's
dump after the failure then dies copying weights off the GPU, leaving a corrupt .pt2 (seen with
torch 2.11 on an H200). Under capture, PyTorch also dumps every AOTI compile *before* compiling
(AOTINDUCTOR_REPRO_LEVEL=3, or 4 for accuracy); capture snapshots each dump as it appears, before the
failing compile can overwrite it, then reproduces every snapshot in an isolated worker.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from dataclasses import dataclass

from .artifacts import relocate_dump
from .layout import DumpLayout, launcher_glob
from .procs import exit_text

POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Captured:
    exit_status: str
    launchers: list[str]


def capture(command: list[str], debug_dir: str, accuracy: bool) -> Captured:
    debug_dir = os.path.abspath(debug_dir)
    env = dict(os.environ, DUMP_AOTI_MINIFIER="1", AOTINDUCTOR_REPRO_LEVEL="4" if accuracy else "3",
               TORCH_COMPILE_DEBUG_DIR=debug_dir)
    started = time.time()
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as e:
        raise ValueError(f"cannot run {command[0]!r}: {e.strerror}") from e
    seen: set[tuple[str, int]] = set()
    snapshots: list[str] = []
    while proc.poll() is None:
        snapshots += _snapshot_new_dumps(debug_dir, started, seen)
        time.sleep(POLL_SECONDS)
    snapshots += _snapshot_new_dumps(debug_dir, started, seen)
    return Captured(exit_status=exit_text(proc.returncode), launchers=snapshots)


def _snapshot_new_dumps(debug_dir: str, started: float, seen: set[tuple[str, int]]) -> list[str]:
    """PyTorch writes the launcher after its .pt2, so a launcher on disk means a complete dump."""
    taken = []
    for launcher in sorted(glob.glob(launcher_glob(debug_dir))):
        if ".capture" in launcher:
            continue
        try:
            mtime = os.stat(launcher).st_mtime_ns
        except OSError:
            continue
        if mtime < (started - 1) * 1e9 or (launcher, mtime) in seen:
            continue
        seen.add((launcher, mtime))
        try:
            taken.append(relocate_dump(launcher, debug_dir, f"{DumpLayout.of(launcher).run_name}.capture{len(seen)}"))
        except OSError:
            continue  # the dump is being rewritten right now; the next poll sees its new version
    return taken

