"""`aoti-minify capture -- <command>`: catch failures PyTorch cannot dump on its own.

A device-side assert or a segfault can end the user's process before PyTorch writes its launcher
(it dumps after the failure). Run under capture, PyTorch dumps every AOTI compile's launcher *before*
compiling (AOTINDUCTOR_REPRO_LEVEL=3, or 4 for accuracy), so the failing one survives the crash;
capture then reproduces each new launcher in an isolated worker.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Captured:
    exit_status: str
    launchers: list[str]


def capture(command: list[str], debug_dir: str, accuracy: bool) -> Captured:
    env = dict(os.environ, DUMP_AOTI_MINIFIER="1", AOTINDUCTOR_REPRO_LEVEL="4" if accuracy else "3",
               TORCH_COMPILE_DEBUG_DIR=os.path.abspath(debug_dir))
    started = time.time()
    try:
        code = subprocess.run(command, env=env).returncode
    except FileNotFoundError as e:
        raise ValueError(f"cannot run {command[0]!r}: {e.strerror}") from e
    pattern = os.path.join(os.path.abspath(debug_dir), "torch_compile_debug", "run_*", "minifier", "minifier_launcher.py")
    launchers = sorted((p for p in glob.glob(pattern) if os.path.getmtime(p) >= started - 1), key=os.path.getmtime)
    return Captured(exit_status=describe_exit(code), launchers=launchers)


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
