"""PyTorch's own AOTI minifier and aoti-minify on the same dumps, in one run.

    python bench/run.py                       # CPU: seed x 3 injections, residual 6/24/96 blocks
    python bench/run.py --device cuda         # the same on a GPU
    python bench/run.py --only seed --pytorch-timeout 600
    python bench/run.py --set real --only hf-    # the real-model workloads of this device (HF models)

For each workload PyTorch dumps a real failure once; each tool then minifies its own copy of it
(PyTorch by running the dumped minifier_launcher.py, aoti-lens by `aoti-minify minify`, without a
prior `run`). It prints wall time, compile queries and final graph size (compute nodes) for both and
the ratios, and writes the table as JSON lines and each aoti-lens run's worker timeline (bench/timeline.py)
beside it. "floor" is what one compile of the original graph plus one of the final graph cost in that same
run (from aoti-minify's events); "start-up" is how long its first worker took to import torch and Inductor
and load the program. Any minifier that starts cold pays start-up + floor at least.
"warm" is a second aoti-minify on a fresh copy of the same dump, started while the first run's fork server
(`--keep-warm`) still has torch imported: what the editor's Minify after its background reproduction costs.
Nothing here is asserted: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from minifier.examples.workloads import WORKLOADS as REAL_WORKLOADS  # noqa: E402
from minifier.artifacts import relocate_dump  # noqa: E402
from minifier.procs import exit_text  # noqa: E402
from minifier.worklog import forked_by, logs_under  # noqa: E402
from timeline import run_marks, start_up, timeline  # noqa: E402  (bench/timeline.py, beside this file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The toy models (minifier/examples/models.py): name -> (model, blocks, injected relu bug).
WORKLOADS = {
    "seed-compile_error": ("seed", 1, "compile_error"),
    "seed-runtime_error": ("seed", 1, "runtime_error"),
    "seed-accuracy": ("seed", 1, "accuracy"),
    "residual6-compile_error": ("residual", 6, "compile_error"),
    "residual24-compile_error": ("residual", 24, "compile_error"),
    "residual96-compile_error": ("residual", 96, "compile_error"),
}
# Real models (minifier/examples/workloads.py), each for its own device.
SETS = {"toy": list(WORKLOADS), "real": list(REAL_WORKLOADS), "all": [*WORKLOADS, *REAL_WORKLOADS]}


@dataclass
class Measure:
    tool: str
    workload: str
    status: str
    seconds: float
    queries: int | None
    nodes: int | None
    start_nodes: int | None = None
    floor: float | None = None  # one compile of the original + one of the final graph, as measured in this run
    start_up: float | None = None  # a worker's start: torch, Inductor and the program loaded (bench/timeline.py)
    note: str = ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--set", dest="workload_set", default="toy", choices=tuple(SETS),
                        help="toy models, the real-model workloads of --device, or both (default toy)")
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--pytorch-timeout", type=float, default=1800.0)
    parser.add_argument("--skip-pytorch", default="", help="workloads (substrings) where PyTorch is not run")
    parser.add_argument("--workers", type=int, default=0, help="aoti-minify workers (default: its own)")
    parser.add_argument("--out", default="", help="JSON-lines results file (default: bench/results-<device>.jsonl)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--no-warm", dest="warm", action="store_false", help="skip the warm second aoti-lens run")
    args = parser.parse_args()
    chosen = [w for w in SETS[args.workload_set] if (w in WORKLOADS or REAL_WORKLOADS[w].device == args.device)
              and (not args.only or any(s in w for s in args.only.split(",")))]
    scratch = tempfile.mkdtemp(prefix="aoti-bench-")
    out = args.out or os.path.join(ROOT, "bench", f"results-{args.device}.jsonl")
    rows: list[tuple[Measure, Measure, Measure | None]] = []
    timelines: list[str] = []
    print(f"# {time.strftime('%Y-%m-%d')} {platform.node()} {_torch_version()} device={args.device} "
          f"cores={os.cpu_count()}", flush=True)
    try:
        launchers = dump_all(scratch, chosen, args.device)
        for name in chosen:
            launcher = launchers[name]
            skip = args.skip_pytorch and any(s in name for s in args.skip_pytorch.split(","))
            theirs = (Measure("pytorch", name, "skipped", 0, None, None) if skip
                      else run_pytorch(relocate_dump(launcher, os.path.join(scratch, name, "pytorch")), name,
                                       args.pytorch_timeout))
            ours = run_ours(launcher, os.path.join(scratch, name, "ours"), name, args.workers, timelines, args.warm)
            warm = None
            if args.warm:
                warm_dir = os.path.join(scratch, name, "warm")
                warm = run_ours(launcher, warm_dir, name, args.workers, timelines, True, "aoti-lens-warm")
                end_fork_servers(warm_dir)  # the next workload's first run must start cold
            rows.append((theirs, ours, warm))
            print(row_text(theirs, ours, warm), flush=True)
    finally:
        with open(out, "w") as f:
            for row in rows:
                f.writelines(json.dumps(asdict(m)) + "\n" for m in row if m is not None)
        with open(os.path.splitext(out)[0] + "-timeline.txt", "w") as f:
            f.write("\n".join(timelines))
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(rows))
    print(f"\nresults: {out}")
    return 0


def dump_all(scratch: str, names: list[str], device: str) -> dict[str, str]:
    """Dumps are not timed, so they are made side by side before the timed runs start."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        made = {name: pool.submit(dump, os.path.join(scratch, name, "dump"), name, device) for name in names}
    return {name: future.result() for name, future in made.items()}


def dump(out: str, name: str, device: str) -> str:
    if name in WORKLOADS:
        model, blocks, bug = WORKLOADS[name]
        what = ["--model", model, "--blocks", str(blocks), "--bug", bug, "--device", device]
    else:
        what = ["--workload", name]
    proc = subprocess.run([sys.executable, "-m", "minifier.examples.dump", "--out", out, *what],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"dump failed for {name}: {proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _run_args(name: str) -> tuple[str, ...]:
    """What a real workload's runs need beyond its launcher (--import of its custom ops, --accuracy)."""
    return REAL_WORKLOADS[name].run_args if name in REAL_WORKLOADS else ()


def _pytorch_command(launcher: str, name: str) -> list[str]:
    """PyTorch's launcher, with a real workload's --accuracy; it cannot import custom ops itself, so it then
    runs as __main__ after importing them."""
    workload = REAL_WORKLOADS.get(name)
    argv = [launcher, *(["minify", "--accuracy"] if workload and workload.accuracy_flag else [])]
    imports = workload.imports if workload else ()
    if not imports:
        return [sys.executable, *argv]
    return [sys.executable, "-c", f"import runpy, sys, {', '.join(imports)}; sys.argv = {argv!r}; "
            f"runpy.run_path({launcher!r}, run_name='__main__')"]


def run_pytorch(launcher: str, name: str, timeout: float) -> Measure:
    cwd = os.path.dirname(os.path.dirname(launcher))
    started = time.monotonic()
    proc = subprocess.Popen(_pytorch_command(launcher, name), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
        status = "ok" if proc.returncode == 0 else exit_text(proc.returncode)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        status = f"timeout>{timeout:.0f}s"
    seconds = time.monotonic() - started
    with open(os.path.join(os.path.dirname(launcher), "pytorch-minifier.log"), "w") as f:
        f.write(log)
    queries = _last_int(r"Made (\d+) queries", log)
    checkpoints = re.findall(r"Writing checkpoint with (\d+) nodes to (\S+)", log)
    nodes = _aten_calls(checkpoints[-1][1]) if checkpoints else None
    if status == "ok" and not checkpoints:
        status = "no checkpoint"
    return Measure("pytorch", name, status, round(seconds, 1), queries, nodes, note=_tail_reason(log, status))


def run_ours(dump_launcher: str, folder: str, name: str, workers: int, timelines: list[str], keep_warm: bool,
             tool: str = "aoti-lens") -> Measure:
    """aoti-minify on its own copy of the dump; with `keep_warm` its fork server waits for the next run
    (this process owns it, so it never outlives the benchmark)."""
    launcher = relocate_dump(dump_launcher, folder)
    started = time.monotonic()
    extra = (["--workers", str(workers)] if workers else []) + (["--keep-warm", "600"] if keep_warm else [])
    extra += _run_args(name)
    proc = subprocess.run([sys.executable, "-m", "minifier", "minify", launcher, "--events", *extra],
                          capture_output=True, text=True, cwd=ROOT)
    seconds = time.monotonic() - started
    marks = run_marks(folder)
    timelines += [f"# {name} ({tool})", *timeline(marks), ""]
    measure = _measure_ours(proc, tool, name, seconds)
    measure.start_up = start_up(marks)
    return measure


def _measure_ours(proc: subprocess.CompletedProcess, tool: str, name: str, seconds: float) -> Measure:
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = next((e for e in events if e["event"] == "done"), None)
    if proc.returncode != 0 or done is None:
        return Measure(tool, name, f"exit {proc.returncode}", round(seconds, 1), None, None, note=proc.stderr[-300:])
    candidates = [e for e in events if e["event"] == "candidate" and not e["cached"]]
    original = next((e["seconds"] for e in candidates if e["nodes"] == done["start_nodes"]), None)
    final = next((e["seconds"] for e in reversed(candidates) if e["nodes"] == done["nodes"] and e["verdict"] == "fails"),
                 None)
    floor = round(original + final, 1) if original is not None and final is not None else None
    return Measure(tool, name, "ok", round(seconds, 1), done["queries"], done["nodes"], done["start_nodes"], floor)


def end_fork_servers(folder: str) -> None:
    for log in logs_under(folder):
        with open(log, errors="replace") as f:
            for pid in forked_by(f.read()):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def row_text(theirs: Measure, ours: Measure, warm: Measure | None) -> str:
    text = (f"{ours.workload}: pytorch {theirs.status} {theirs.seconds:.0f}s q={theirs.queries} n={theirs.nodes} | "
            f"aoti-lens {ours.status} {ours.seconds:.0f}s q={ours.queries} n={ours.nodes} (from {ours.start_nodes})")
    return text + (f" | warm {warm.status} {warm.seconds:.0f}s q={warm.queries} n={warm.nodes}" if warm else "")


def table(rows: list[tuple[Measure, Measure, Measure | None]]) -> str:
    lines = ["| workload | start nodes | PyTorch time | PyTorch queries | PyTorch final nodes | aoti-lens time | "
             "aoti-lens queries | aoti-lens final nodes | time ratio | query ratio | aoti-lens time / floor | "
             "aoti-lens time / (start-up + floor) | warm aoti-lens time, queries, nodes | warm time / its floor |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for theirs, ours, warm in rows:
        warm_cells = (f"{_time(warm)}, {_v(warm.queries)} q, {_v(warm.nodes)} | {_of(warm.seconds, warm.floor)}"
                      if warm else "- | -")
        lines.append(f"| {ours.workload} | {ours.start_nodes} | {_time(theirs)} | {_v(theirs.queries)} | "
                     f"{_v(theirs.nodes)} | {_time(ours)} | {_v(ours.queries)} | {_v(ours.nodes)} | "
                     f"{_ratio(theirs.seconds, ours.seconds, theirs)} | {_ratio(theirs.queries, ours.queries, theirs)} | "
                     f"{_of(ours.seconds, ours.floor)} | {_of(ours.seconds, _sum(ours.start_up, ours.floor))} | "
                     f"{warm_cells} |")
    return "\n".join(lines)


def _of(seconds: float, floor: float | None) -> str:
    return f"{seconds / floor:.1f}x of {floor:.1f} s" if floor else "-"


def _sum(a: float | None, b: float | None) -> float | None:
    return a + b if a is not None and b is not None else None


def _time(m: Measure) -> str:
    if m.status == "skipped":
        return "not run"
    return f"{m.seconds:.1f} s" + ("" if m.status == "ok" else f" ({m.status})")


def _ratio(a, b, theirs: Measure) -> str:
    if not a or not b or theirs.status == "skipped":
        return "-"
    bound = "" if theirs.status == "ok" else ">"
    return f"{bound}{a / b:.1f}x"


def _v(value) -> str:
    return "-" if value is None else str(value)


def _aten_calls(checkpoint: str) -> int | None:
    """Compute nodes of PyTorch's checkpoint: aten calls in its commented-out forward()."""
    try:
        with open(checkpoint) as f:
            text = f.read()
    except OSError:
        return None
    forward = text.split("def forward", 1)[-1].split("\n\n", 1)[0]
    return len(re.findall(r"= torch\.ops\.", forward))


def _last_int(pattern: str, text: str) -> int | None:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else None


def _tail_reason(log: str, status: str) -> str:
    if status == "ok":
        return ""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return " / ".join(lines[-3:])[-400:]


def _torch_version() -> str:
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return f"torch {proc.stdout.strip()}"


if __name__ == "__main__":
    sys.exit(main())
