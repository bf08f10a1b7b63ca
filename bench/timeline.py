"""Lay out where a minify's time went, worker by worker, from the worker logs' timed marks.

    python bench/timeline.py DEBUG_DIR [DEBUG_DIR ...]

Each DEBUG_DIR is searched for `aoti-lens-work/worker-*.log` and `forkserver.log`. Every line is
seconds since the first process was started, the process, and the step it began: started (the fork
server by the driver, a worker by the fork server), imported (the fork server has torch), values
(the eager run), query, compile, compiled (how long it took, and the Inductor timers it spent the most in:
each timer's time includes its callees'), load, run, and answered (the reply sent: Ready, Warmed, Outcome...).
A run that found a warm fork server has no forkserver.log of its own.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from minifier.exchange.worklog import compiled_marks, logs_under, phase_marks, starts


def marks(log: str) -> list[tuple[float, str, str]]:
    """(clock time, process, step) for every timed line of one worker or fork server log."""
    name = os.path.basename(log).removesuffix(".log")
    with open(log, errors="replace") as f:
        text = f.read()
    started = [(t, name, what) for t, what in starts(text)]
    steps = [(t, name, f"{step} {os.path.basename(detail)}".strip()) for t, step, detail in phase_marks(text)]
    compiles = [(t, name, f"compiled {times}") for t, times in compiled_marks(text)]
    return started + steps + compiles


def run_marks(debug_dir: str) -> list[tuple[float, str, str]]:
    return sorted(m for log in logs_under(debug_dir) for m in marks(log))


def timeline(found: list[tuple[float, str, str]]) -> list[str]:
    if not found:
        return ["no timed worker logs"]
    return [f"{t - found[0][0]:7.2f}  {worker:9}  {step}" for t, worker, step in found]


def start_up(found: list[tuple[float, str, str]]) -> float | None:
    """Seconds from starting the fork server (or, when it was warm, the first worker) to the first
    worker ready (torch imported, the program loaded): what a cold minifier pays before its first compile."""
    ready = next((t for t, _, step in found if step == "answered Ready"), None)
    return round(ready - found[0][0], 1) if ready is not None else None


def main(argv: list[str]) -> int:
    for debug_dir in argv:
        print(f"# {debug_dir}")
        print("\n".join(timeline(run_marks(debug_dir))))
    return 0 if argv else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
