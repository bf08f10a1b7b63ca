"""Lay out where a minify's time went, worker by worker, from the worker logs' timed marks.

    python bench/timeline.py DEBUG_DIR [DEBUG_DIR ...]

Each DEBUG_DIR is searched for `aoti-lens-work/worker-*.log`. Every line is seconds since the first
worker was started, the worker, and the step it began: started (spawned by the driver), values (the
eager run), query, compile, load, run, and answered (the reply sent: Ready, Warmed, Outcome...).
"""

from __future__ import annotations

import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from minifier.workers import phase_marks  # noqa: E402

_STARTED = re.compile(r"^=== worker (\d+), start (\d+) at ([0-9.]+) ===$", re.MULTILINE)


def marks(log: str) -> list[tuple[float, str, str]]:
    """(clock time, worker, step) for every timed line of one worker log."""
    name = os.path.basename(log).removesuffix(".log")
    with open(log, errors="replace") as f:
        text = f.read()
    started = [(float(m[3]), name, f"started (start {m[2]})") for m in _STARTED.finditer(text)]
    steps = [(t, name, f"{step} {os.path.basename(detail)}".strip()) for t, step, detail in phase_marks(text)]
    return started + steps


def run_marks(debug_dir: str) -> list[tuple[float, str, str]]:
    logs = glob.glob(os.path.join(debug_dir, "**", "aoti-lens-work", "worker-*.log"), recursive=True)
    return sorted(m for log in logs for m in marks(log))


def timeline(found: list[tuple[float, str, str]]) -> list[str]:
    if not found:
        return ["no timed worker logs"]
    return [f"{t - found[0][0]:7.2f}  {worker:9}  {step}" for t, worker, step in found]


def start_up(found: list[tuple[float, str, str]]) -> float | None:
    """Seconds from starting the workers to the first one ready (torch imported, the program loaded):
    what any minifier pays once before its first compile."""
    ready = next((t for t, _, step in found if step == "answered Ready"), None)
    return round(ready - found[0][0], 1) if ready is not None else None


def main(argv: list[str]) -> int:
    for debug_dir in argv:
        print(f"# {debug_dir}")
        print("\n".join(timeline(run_marks(debug_dir))))
    return 0 if argv else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
