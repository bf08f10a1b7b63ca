"""The worker logs: the format the pool, the fork server and the workers write, and its readers.

Each worker slot appends to `worker-<i>.log` in the dump's scratch folder and the fork server to
`forkserver.log`: a header line each time a process starts, then what the process prints (Inductor,
g++ and CUDA print there freely), among it a timed phase mark before each step. The pool reads a
log's tail to say where a worker died, bench/timeline.py lays out where a run's time went, and the
benchmark and the tests find which fork server forked a worker.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import sys
import threading
import time
import traceback

from ..contract.layout import SCRATCH

FORK_SERVER_LOG = "forkserver.log"
LOG_LIMIT = 32 << 20  # bytes of one worker's log, about: what it printed in the last second may come on top
_WORKER_LOG = "worker-{}.log"
PHASE_MARK = "[aoti-lens phase] "
PROVENANCE_MARK = "[aoti-lens provenance] "
COMPILED_MARK = "[aoti-lens compiled] "
STACK_MARK = "[aoti-lens stack] "  # AOTI_LENS_COMPILE_STACKS: where a slow compile spent its time
# Inductor's timers that hold all of a compile: the time of each is the compile's own, which the mark says.
_WHOLE_COMPILE = {
    "compile_fx.<locals>.fw_compiler_base",
    "compile_fx_inner",
    "fx_codegen_and_compile",
    "GraphLowering.compile_to_fn",
}
# A provenance key `<scheduler node>:codegen-failed`: the fused node whose code generation raised.
CODEGEN_FAILED = "codegen-failed"
_WORKER_HEADER = re.compile(r"^=== worker (\d+), start (\d+) at ([0-9.]+), forked by (\d+) ===$", re.MULTILINE)
_SERVER_HEADER = re.compile(r"^=== fork server (\d+) started at ([0-9.]+) ===$", re.MULTILINE)


def worker_log(log_dir: str, index: int) -> str:
    return os.path.join(log_dir, _WORKER_LOG.format(index))


def fork_server_log(log_dir: str) -> str:
    return os.path.join(log_dir, FORK_SERVER_LOG)


def logs_under(folder: str) -> list[str]:
    """Every worker and fork server log in the scratch folders below `folder`."""
    work = os.path.join(folder, "**", SCRATCH)
    return [
        log
        for name in (_WORKER_LOG.format("*"), FORK_SERVER_LOG)
        for log in glob.glob(os.path.join(work, name), recursive=True)
    ]


def worker_header(index: int, generation: int, server_pid: int) -> str:
    """Written by the pool before worker `index` starts for the `generation`-th time."""
    return f"\n=== worker {index}, start {generation} at {time.time():.3f}, forked by {server_pid} ===\n"


def server_header(pid: int) -> str:
    return f"=== fork server {pid} started at {time.time():.3f} ==="


def phase(name: str, detail: str) -> None:
    """Mark, in the log on stdout, the step this process begins now: a crash is attributed to compile,
    load or run, and the timeline shows where the time went."""
    print(f"{PHASE_MARK}{name} {detail} at {time.time():.3f}", flush=True)


def provenance_mark(kernels: dict[str, list[str]]) -> None:
    """Write Inductor's kernel provenance (`name:handle` -> graph nodes) into the log: a worker that
    dies while running the compiled program cannot send it any other way."""
    print(f"{PROVENANCE_MARK}{json.dumps(kernels, separators=(',', ':'))}", flush=True)


def compiled_mark(seconds: float, spent: dict[str, float], shown: int = 6) -> None:
    """Where one compile's time went, by Inductor's own timers (`spent`: timer -> seconds; nested, so a
    timer's time includes its callees'): why a 1-node candidate takes a minute on one machine, two seconds
    on another, shows in the log that comes back from it."""
    top = sorted(((t, k) for k, t in spent.items() if k not in _WHOLE_COMPILE and t >= 0.5), reverse=True)[:shown]
    detail = ", ".join(f"{k} {t:.1f}" for t, k in top)
    print(f"{COMPILED_MARK}in {seconds:.1f} s{': ' + detail if detail else ''} at {time.time():.3f}", flush=True)


@contextlib.contextmanager
def sampling_stacks(every: float, depth: int = 32):
    """While the body runs, print every `every` seconds (never when 0) the calling thread's stack below
    this call: its outermost frames, then its innermost, `depth` in all. A Python thread that holds the
    GIL reads it: faulthandler's watchdog reads frames without it, and killed one CPU worker in four
    with SIGSEGV mid-compile."""
    if every <= 0:
        yield
        return
    target, done, start = threading.get_ident(), threading.Event(), time.monotonic()
    entry = traceback.extract_stack()

    def sample() -> None:
        while not done.wait(every):
            frame = sys._current_frames().get(target)
            if frame is not None:
                print(
                    f"{STACK_MARK}{time.monotonic() - start:.1f} s into the compile:\n"
                    f"{_stack_below(frame, entry, depth)}",
                    end="",
                    flush=True,
                )

    sampler = threading.Thread(target=sample, daemon=True, name="compile-stacks")
    sampler.start()
    try:
        yield
    finally:
        done.set()
        sampler.join()


def _stack_below(frame, entry: traceback.StackSummary, depth: int) -> str:
    """The stack of `frame` below the frames it shares with `entry` (those above the `with`)."""
    frames = traceback.extract_stack(frame)
    shared = 0
    for now, then in zip(frames, entry):
        if (now.filename, now.lineno, now.name) != (then.filename, then.lineno, then.name):
            break
        shared += 1
    below = [f for f in frames[shared:] if not f.filename.startswith("<frozen")]
    if len(below) > depth:
        below = below[: depth // 4] + below[-(depth - depth // 4) :]
    return "".join(traceback.format_list(below))


def provenance_in(log_text: str) -> dict[str, list[str]]:
    """The last provenance mark of a log, or nothing."""
    at = log_text.rfind(PROVENANCE_MARK)
    if at == -1:
        return {}
    line = log_text[at + len(PROVENANCE_MARK) :].split("\n", 1)[0]
    try:
        found = json.loads(line)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {key: [n for n in nodes if isinstance(n, str)] for key, nodes in found.items() if isinstance(nodes, list)}


def phase_marks(log_text: str) -> list[tuple[float, str, str]]:
    """(clock time, step, detail) of each step a log marks."""
    return _timed_lines(log_text, PHASE_MARK)


def compiled_marks(log_text: str) -> list[tuple[float, str]]:
    """(clock time, "in N s: timer seconds, ...") of each compile a log says the times of."""
    return [(t, f"{step} {detail}") for t, step, detail in _timed_lines(log_text, COMPILED_MARK)]


def _timed_lines(log_text: str, mark: str) -> list[tuple[float, str, str]]:
    marks = []
    for line in log_text.splitlines():
        if line.startswith(mark):
            text, _, at = line[len(mark) :].rpartition(" at ")
            step, _, detail = text.partition(" ")
            try:
                marks.append((float(at), step, detail))
            except ValueError:
                continue  # the tail of a log may start mid-line
    return marks


def last_phase(log_text: str) -> str | None:
    marks = phase_marks(log_text)
    return marks[-1][1] if marks else None


def starts(log_text: str) -> list[tuple[float, str]]:
    """(clock time, what started) for each process start a log's headers record."""
    workers = [(float(m[3]), f"started (start {m[2]})") for m in _WORKER_HEADER.finditer(log_text)]
    servers = [(float(m[2]), "started") for m in _SERVER_HEADER.finditer(log_text)]
    return workers + servers


def forked_by(log_text: str) -> set[int]:
    """The fork servers that the workers of a worker log were forked by."""
    return {int(m[4]) for m in _WORKER_HEADER.finditer(log_text)}


def keep_under(limit: int, keep: int = 64 << 10, every: float = 0.5) -> None:
    """Keep this process's log (its stdout, which its stderr shares) under `limit` bytes: a library
    that prints megabytes per compile, for hours, must not fill the disk. Past the limit the log is
    cut to its last `keep` bytes (where a crash is explained) under a line that says so."""

    def watch() -> None:
        while True:
            time.sleep(every)
            try:
                size = os.fstat(1).st_size
                if size > limit:
                    last = os.pread(1, keep, size - keep)
                    os.ftruncate(1, 0)  # the log is opened to append: the next write lands at the start
                    os.write(1, f"[aoti-lens log] {size - keep} bytes cut\n".encode() + last)
            except OSError:
                return  # not a file (a terminal, a pipe): nothing to keep small

    threading.Thread(target=watch, daemon=True, name="log-limit").start()


def size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def since(path: str, offset: int, limit: int = 1 << 20) -> str:
    """What a log received from `offset` on (its last `limit` bytes); all of it when the log was cut
    to size (keep_under) since `offset`."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(offset if offset <= end else 0, end - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def tail(path: str, limit: int = 2000) -> str:
    return since(path, 0, limit)
