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
(`--keep-warm`) still has torch imported: what the editor's Minify after its background reproduction costs;
its final graph is compared with the first run's (the same dump minified twice gives the same repro).
Unless --no-compare, each workload is also minified with `--no-slice` (the general search alone) and
`--slices-first` (the guesses awaited before it, the order the race replaced), and each workload gets one
`aoti-minify run` each repeat (what one reproduction costs; the median is the ratios' denominator). "done" is
when the minify's `done` event came (repro.py written), "after the last checkpoint" the wall time from the last
checkpoint to the process's end: the last mile, which the minimal graph's proof and the standalone check take.
With the `triage` mode, `aoti-minify triage` runs on the first aoti-lens run's minimized copy: whether it found a
workaround (verified on the original), how many config changes it tried, its wall time, and that time beside
the original's compile (issue 32's target: triage <= minify + 3 compiles of the original, so what triage adds
after the minify <= 3 compiles of the original; a triage run alone pays a new process's start-up, the minify's
is taken off).
The targets of issues 13 and 32 are computed last.
Nothing here is asserted: it measures.

Every run starts from its own copy of the Inductor cache (Triton's inside it) as the dump left it: the
original's kernels compiled, as a user's are after the failing run. Shared, the first of the modes paid the
cold builds the next ones took from the cache (on a fresh H200 machine the first run's CPU ISA probe ended
at 15.8 s, the next two's at 9.1 and 11.0 s: its g++ builds were cached). PyTorch's minifier uses the dump's
own cache: its launcher sets the variable.

With `--repeat N` the aoti-lens runs of a workload are made N times, their order reversed on every other
repeat, and each run's row shows its median (the lower middle one): on the H200 the first of two modes that
issued the same 29 compiles ran 11 s longer than the second (Qwen2's complex sub, 74.2 vs 63.2 s), so one
ordered pass compares the order as much as the modes.

Every measure is written as soon as it ends, so a run stopped at a device's time limit keeps what it
measured. `--modes` picks the runs of each workload, so that one too long for one command can be measured
in several (`--modes pytorch,ours` in one, `--modes no-slice,slices-first` in the next); `--report` merges
their files, a later file's measure replacing the same run of the same workload.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from footprint import Footprint, Peaks
from timeline import run_marks, start_up, timeline

from minifier.contract import wire
from minifier.contract.archive import weight_bytes
from minifier.contract.artifacts import relocate_dump
from minifier.contract.events import Triage
from minifier.contract.launcher import read_launcher
from minifier.contract.layout import MINIFIER, REPRO_STANDALONE, TRIAGE_JSON, DumpLayout
from minifier.contract.procs import exit_text
from minifier.examples.workloads import WORKLOADS as REAL_WORKLOADS
from minifier.exchange.worklog import forked_by, logs_under

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
REAL = [name for name, w in REAL_WORKLOADS.items() if not w.big]
SETS = {
    "toy": list(WORKLOADS),
    "real": REAL,
    "big": [name for name, w in REAL_WORKLOADS.items() if w.big],
    # bugs torch has, each inside an ordinary model (issue 45's corpus)
    "real-bugs": [name for name in REAL if REAL_WORKLOADS[name].failure_class.origin == "torch"],
    "all": [*WORKLOADS, *REAL],
}


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
    original: float | None = None  # the original's compile and run: the sanity check every mode starts with
    start_up: float | None = None  # a worker's start: torch, Inductor and the program loaded (bench/timeline.py)
    graph: str = ""  # a hash of the final graph's code: the same dump should give the same repro
    note: str = ""
    repeat: int = 0  # which of --repeat's passes made it
    workaround: str = ""  # triage: the first verified workaround's configs, or "none among N"
    done_s: float | None = None  # when `done` came (repro.py written): what a user waits for
    tail_s: float | None = None  # from the last checkpoint to the process's end: the last mile
    # bench/footprint.py: peak summed PSS of the process tree, peak GPU memory it held, peak growth of its dump
    host_pss: int | None = None
    gpu: int | None = None
    written: int | None = None
    weights: int | None = None  # the dump's weights, as its .pt2 stores them


@dataclass
class Row:
    theirs: Measure
    ours: Measure
    warm: Measure | None = None
    no_slice: Measure | None = None
    slices_first: Measure | None = None
    one_run: Measure | None = None  # `aoti-minify run`: one reproduction
    triage: Measure | None = None  # `aoti-minify triage` after the first run's minify
    repros: tuple[str, ...] = ()  # the final graph's hash of every aoti-lens run (each repeat, warm ones too)


# Who compiles each workload's dump: examples/dump.py's arguments for it
COMPILERS = {
    "aoti": ["--compiler", "aoti"],
    "torch.compile": ["--compiler", "torch.compile"],
    "torch.compile-dynamo": ["--compiler", "torch.compile", "--repro-after", "dynamo"],
}
# The runs of one workload, in the order they are made; "warm" reuses the fork server "ours" leaves.
MODES = ("pytorch", "ours", "warm", "triage", "no-slice", "slices-first", "run")
AS_DUMPED = "cache-as-dumped"  # beside a workload's dump: its Inductor cache as the dump left it


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--set",
        dest="workload_set",
        default="toy",
        choices=tuple(SETS),
        help="toy models, the real-model workloads of --device, the real bugs among them, the big models, or toy "
        "and real (default toy)",
    )
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument(
        "--compiler",
        default="aoti",
        choices=tuple(COMPILERS),
        help="dump each workload's failure under aoti_compile_and_package (default) or torch.compile (its after_aot "
        "launcher, or with torch.compile-dynamo its after_dynamo one, beside PyTorch's minifier of that launcher); a "
        "workload whose bug does not show there is skipped",
    )
    parser.add_argument("--pytorch-timeout", type=float, default=1800.0)
    parser.add_argument("--skip-pytorch", default="", help="workloads (substrings) where PyTorch is not run")
    parser.add_argument("--workers", type=int, default=0, help="aoti-minify workers (default: its own)")
    parser.add_argument(
        "--out", default="", help="JSON-lines results file (default: bench/results/results-<device>.jsonl)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--no-warm", dest="warm", action="store_false", help="skip the warm second aoti-lens run")
    parser.add_argument(
        "--no-compare",
        dest="compare",
        action="store_false",
        help="skip the --no-slice and --slices-first runs and the one `aoti-minify run` of each workload",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="make the aoti-lens runs N times in alternating order; rows show each run's median",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"the runs of each workload, comma-separated (default all: {','.join(MODES)})",
    )
    parser.add_argument(
        "--logs",
        metavar="TGZ",
        help="also pack each first aoti-lens run's worker and fork server "
        "logs (the first MiB of each) into TGZ: what a device run sends back for a closer look",
    )
    parser.add_argument("--report", nargs="+", metavar="JSONL", help="print the tables and targets of earlier runs")
    args = parser.parse_args()
    if args.report:
        rows = read_rows(args.report)
        print(f"{table(rows)}\n\n{footprint(rows)}\n\n{targets(rows)}\n\n{last_mile(rows)}\n\n{triage_targets(rows)}")
        return 0
    args.modes = chosen_modes(args, parser)
    chosen = [
        w
        for w in SETS[args.workload_set]
        if (w in WORKLOADS or REAL_WORKLOADS[w].device == args.device)
        and (not args.only or any(s in w for s in args.only.split(",")))
    ]
    scratch = tempfile.mkdtemp(prefix="aoti-bench-")
    compiled = "" if args.compiler == "aoti" else f"-{args.compiler}"
    out = args.out or os.path.join(ROOT, "bench", "results", f"results-{args.device}{compiled}.jsonl")
    measures: list[Measure] = []
    timelines: list[str] = []

    def record(measure: Measure) -> None:
        measures.append(measure)
        print(f"{measure.workload}: {measure.tool} {_cell(measure)}", flush=True)
        save(out, measures, timelines)

    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.node()} {_torch_version()} device={args.device} "
        f"cores={os.cpu_count()} compiler={args.compiler}",
        flush=True,
    )
    try:
        launchers = dump_all(scratch, chosen, args.device, args.compiler)
        for name in launchers:
            measure_workload(name, launchers[name], os.path.join(scratch, name), args, timelines, record)
            print(*map(row_text, rows_of([m for m in measures if m.workload == name])), sep="\n", flush=True)
    finally:
        save(out, measures, timelines)
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = rows_of(measures)
    print()
    print(table(rows))
    print()
    print(footprint(rows))
    print()
    print(targets(rows))
    print()
    print(last_mile(rows))
    print()
    print(triage_targets(rows))
    print(f"\nresults: {out}")
    return 0


def chosen_modes(args: argparse.Namespace, parser: argparse.ArgumentParser) -> set[str]:
    modes = set(filter(None, args.modes.split(",")))
    if modes - set(MODES):
        parser.error(f"unknown --modes {','.join(sorted(modes - set(MODES)))}; choose from {','.join(MODES)}")
    if not args.warm:
        modes.discard("warm")
    if not args.compare:
        modes -= {"no-slice", "slices-first", "run"}
    if "warm" in modes and "ours" not in modes:
        parser.error("--modes warm needs ours: the warm run reuses the fork server the first run keeps")
    if "triage" in modes and "ours" not in modes:
        parser.error("--modes triage needs ours: it triages the first run's minimal repro")
    return modes


def save(out: str, measures: list[Measure], timelines: list[str]) -> None:
    with open(out, "w") as f:
        f.writelines(json.dumps(asdict(m)) + "\n" for m in measures)
    with open(os.path.splitext(out)[0] + "-timeline.txt", "w") as f:
        f.write("\n".join(timelines))


DRIVER_LOG = "aoti-minify.log"  # what `aoti-minify minify` printed on stderr, beside its dump copy
TRIAGE_LOG = "aoti-minify-triage.log"  # what `aoti-minify triage` printed on stderr, beside the same copy

TOOLS = {
    "pytorch": "theirs",
    "aoti-lens": "ours",
    "aoti-lens-warm": "warm",
    "aoti-lens --no-slice": "no_slice",
    "aoti-lens --slices-first": "slices_first",
    "aoti-minify run": "one_run",
    "aoti-minify triage": "triage",
}


def read_rows(paths: list[str]) -> list[Row]:
    """Rows from results files, in their order; a measure in a later file replaces the same run (and repeat)
    of the same workload in an earlier one."""
    measures = []
    for path in paths:
        with open(path) as f:
            measures += [Measure(**json.loads(line)) for line in f if line.strip()]
    return rows_of(measures)


def rows_of(measures: list[Measure]) -> list[Row]:
    """One row per workload that aoti-lens minified: of each run the last measure of every repeat, and of
    those the median by wall time."""
    found: dict[str, dict[str, dict[int, Measure]]] = {}
    for m in measures:
        found.setdefault(m.workload, {}).setdefault(TOOLS[m.tool], {})[m.repeat] = m
    return [
        Row(
            **{
                "theirs": Measure("pytorch", workload, "skipped", 0, None, None),
                **{run: _median(list(repeats.values())) for run, repeats in parts.items()},
            },
            repros=tuple(m.graph for run in ("ours", "warm") for m in parts.get(run, {}).values() if m.status == "ok"),
        )
        for workload, parts in found.items()
        if "ours" in parts
    ]


def _median(measures: list[Measure]) -> Measure:
    """The lower middle measure by wall time: a real run, its queries and floor its own."""
    return sorted(measures, key=lambda m: m.seconds)[(len(measures) - 1) // 2]


def measure_workload(
    name: str, launcher: str, folder: str, args: argparse.Namespace, timelines: list[str], record
) -> None:
    """The chosen runs of one workload, each passed to `record` as it ends."""
    modes = args.modes
    if "pytorch" in modes and not (args.skip_pytorch and any(s in name for s in args.skip_pytorch.split(","))):
        record(run_pytorch(relocate_dump(launcher, os.path.join(folder, "pytorch")), name, args.pytorch_timeout))
    for repeat in range(args.repeat):
        runs = [run for run in ("ours", "no-slice", "slices-first") if run in modes]
        for run in reversed(runs) if repeat % 2 else runs:
            for measure in _aoti_lens_runs(run, name, launcher, folder, args, timelines, repeat):
                measure.repeat = repeat
                record(measure)
        if "run" in modes:  # the ratios' denominator varies as much on a shared VM
            where = os.path.join(folder, "run" if not repeat else f"run-{repeat}")
            measure = run_once(launcher, where, name, run_env(where))
            measure.repeat = repeat
            record(measure)


def _aoti_lens_runs(
    run: str, name: str, launcher: str, folder: str, args: argparse.Namespace, timelines: list[str], repeat: int
):
    """One aoti-lens run of the workload (with `ours`, the warm run after it), each in a folder of its own."""

    def where(mode: str) -> str:
        return os.path.join(folder, mode if not repeat else f"{mode}-{repeat}")

    if run != "ours":
        yield run_ours(
            launcher,
            where(run),
            name,
            args.workers,
            timelines,
            False,
            f"aoti-lens --{run}",
            (f"--{run}",),
            env=run_env(where(run)),
        )
        return
    # the warm run's environment is the first's: the fork server it reuses is the one with that environment
    ours = run_env(where("ours"))
    keep_warm = "warm" in args.modes
    yield run_ours(launcher, where("ours"), name, args.workers, timelines, keep_warm, env=ours)
    if keep_warm:
        yield run_ours(launcher, where("warm"), name, args.workers, timelines, True, "aoti-lens-warm", env=ours)
        end_fork_servers(where("warm"))  # the next run must start cold
    if "triage" in args.modes:
        yield run_triage(where("ours"), name, args.workers, ours)
    if args.logs and not repeat:  # the minify's logs, and the triage's after them in the same folder
        pack_logs(args.logs, where("ours"), name)


def run_env(run_folder: str) -> dict[str, str]:
    """The environment of one run of a workload, in its folder beside the dump: its own copy of the cache
    as dumped."""
    cache = os.path.join(run_folder, "inductor-cache")
    if not os.path.exists(cache):
        shutil.copytree(os.path.join(os.path.dirname(run_folder), AS_DUMPED), cache, symlinks=True)
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}


def pack_logs(tgz: str, folder: str, name: str, limit: int = 1 << 20) -> None:
    """Add the logs and the repro of one run to `tgz` (rewritten whole: a gzip stream cannot be appended to)."""
    members = []
    if os.path.exists(tgz):
        with tarfile.open(tgz) as old:
            members = [(m, old.extractfile(m).read()) for m in old.getmembers() if m.isfile()]
    drivers = [p for p in (os.path.join(folder, DRIVER_LOG), os.path.join(folder, TRIAGE_LOG)) if os.path.exists(p)]
    outputs = [
        found
        for name in (REPRO_STANDALONE, TRIAGE_JSON)
        for found in glob.glob(os.path.join(folder, "**", MINIFIER, name), recursive=True)
    ]
    for log in logs_under(folder) + drivers + outputs:
        with open(log, "rb") as f:
            data = f.read(limit)
        members.append((tarfile.TarInfo(f"{name}/{os.path.relpath(log, folder)}"), data))
    with tarfile.open(tgz + ".tmp", "w:gz") as new:
        for info, data in members:
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
    os.replace(tgz + ".tmp", tgz)


def dump_all(scratch: str, names: list[str], device: str, compiler: str = "aoti") -> dict[str, str]:
    """Dumps are not timed, so they are made side by side before the timed runs start. Under torch.compile, a
    workload whose bug does not show there (one of AOTI's own) dumps nothing and is left out, said."""
    with ThreadPoolExecutor(max_workers=max(1, min(3, (os.cpu_count() or 1) - 1))) as pool:
        made = {name: pool.submit(dump, os.path.join(scratch, name, "dump"), name, device, compiler) for name in names}
    launchers = {}
    for name, future in made.items():
        try:
            launchers[name] = future.result()
        except SystemExit as e:
            if compiler == "aoti":
                raise
            print(f"{name}: left out, no torch.compile dump ({str(e)[-300:]})", flush=True)
    return launchers


def dump(out: str, name: str, device: str, compiler: str = "aoti") -> str:
    """Make the workload's dump in `out`, with an Inductor cache of its own, kept beside it as it was left."""
    if name in WORKLOADS:
        model, blocks, bug = WORKLOADS[name]
        what = ["--model", model, "--blocks", str(blocks), "--bug", bug, "--device", device]
    else:
        what = list(REAL_WORKLOADS[name].dump_args)
    cache = os.path.join(os.path.dirname(out), "dump-cache")
    proc = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", out, *what, *COMPILERS[compiler]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache},
    )
    if proc.returncode != 0:
        raise SystemExit(f"dump failed for {name}: {proc.stderr[-3000:]}")
    shutil.copytree(cache, os.path.join(os.path.dirname(out), AS_DUMPED), symlinks=True)
    return proc.stdout.strip().splitlines()[-1]


def _run_args(name: str) -> tuple[str, ...]:
    """What a real workload's runs need beyond its launcher (--import of its custom ops, --accuracy)."""
    return REAL_WORKLOADS[name].run_args if name in REAL_WORKLOADS else ()


def _is_accuracy(name: str) -> bool:
    if name in REAL_WORKLOADS:
        return REAL_WORKLOADS[name].failure_class.accuracy
    return name in WORKLOADS and WORKLOADS[name][2] == "accuracy"


def _pytorch_command(launcher: str, name: str) -> list[str]:
    """PyTorch's launcher, with a real workload's --accuracy; it cannot import custom ops itself, so it then
    runs as __main__ after importing them."""
    workload = REAL_WORKLOADS.get(name)
    argv = [launcher, *(["minify", "--accuracy"] if workload and workload.accuracy_flag else [])]
    imports = workload.imports if workload else ()
    if not imports:
        return [sys.executable, *argv]
    return [
        sys.executable,
        "-c",
        f"import runpy, sys, {', '.join(imports)}; sys.argv = {argv!r}; "
        f"runpy.run_path({launcher!r}, run_name='__main__')",
    ]


def run_pytorch(launcher: str, name: str, timeout: float) -> Measure:
    cwd = os.path.dirname(os.path.dirname(launcher))
    started = time.monotonic()
    proc = subprocess.Popen(
        _pytorch_command(launcher, name),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # its checkpoints go to the save_dir its launcher names (the folder the dump was written in), not to this copy
    save_dir = read_launcher(launcher).save_dir
    footprint = Footprint(proc.pid, [cwd, *([save_dir] if save_dir and not save_dir.startswith(cwd) else [])])
    try:
        log, _ = proc.communicate(timeout=timeout)
        status = "ok" if proc.returncode == 0 else exit_text(proc.returncode)
    except subprocess.TimeoutExpired:
        footprint.sample()  # before the kill: what it held when it was stopped
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        status = f"timeout>{timeout:.0f}s"
    seconds = time.monotonic() - started
    peaks = footprint.stop()
    with open(os.path.join(os.path.dirname(launcher), "pytorch-minifier.log"), "w") as f:
        f.write(log)
    queries = _last_int(r"Made (\d+) queries", log)
    checkpoints = re.findall(r"Writing checkpoint with (\d+) nodes to (\S+)", log)
    nodes = _aten_calls(checkpoints[-1][1]) if checkpoints else None
    if status == "ok" and not checkpoints:
        status = "no checkpoint"
    measure = Measure("pytorch", name, status, round(seconds, 1), queries, nodes, note=_tail_reason(log, status))
    return _with_peaks(measure, peaks, launcher)


def run_ours(
    dump_launcher: str,
    folder: str,
    name: str,
    workers: int,
    timelines: list[str],
    keep_warm: bool,
    tool: str = "aoti-lens",
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Measure:
    """aoti-minify on its own copy of the dump; with `keep_warm` its fork server waits for the next run
    (this process owns it, so it never outlives the benchmark)."""
    launcher = relocate_dump(dump_launcher, folder, link=True)  # a big model's dump fits the disk once
    extra = (["--workers", str(workers)] if workers else []) + (["--keep-warm", "600"] if keep_warm else [])
    extra += [*_run_args(name), *options]
    argv = [sys.executable, "-m", "minifier", "minify", launcher, "--events", *extra]
    proc, arrived, seconds, peaks = _run_timed(argv, os.path.join(folder, DRIVER_LOG), env, folder)
    marks = run_marks(folder)
    timelines += [f"# {name} ({tool}, in {os.path.basename(folder)})", *timeline(marks), ""]
    measure = _with_peaks(_measure_ours(proc, tool, name, seconds), peaks, launcher)
    measure.start_up = start_up(marks)
    if measure.status == "ok":
        done = next(t for t, e in arrived if e["event"] == "done")
        last = max((t for t, e in arrived if e["event"] == "checkpoint"), default=done)
        measure.done_s, measure.tail_s = round(done, 1), round(seconds - last, 1)
    return measure


def _run_timed(
    argv: list[str], log: str, env: dict[str, str] | None, folder: str
) -> tuple[subprocess.CompletedProcess, list[tuple[float, dict]], float, Peaks]:
    """Run `argv` with its stderr in `log` (each candidate's verdict, in the packed logs); the process, each
    event with the second it arrived on stdout, the wall time, and its footprint (`folder`: its dump)."""
    started = time.monotonic()
    arrived, lines = [], []
    with open(log, "w") as err:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, env=env) as child:
            footprint = Footprint(child.pid, [folder])
            assert child.stdout is not None
            for line in child.stdout:
                lines.append(line)
                if line.startswith("{"):
                    arrived.append((time.monotonic() - started, json.loads(line)))
    seconds = time.monotonic() - started
    peaks = footprint.stop()
    with open(log, errors="replace") as f:
        stderr = f.read()
    return subprocess.CompletedProcess(argv, child.returncode, "".join(lines), stderr), arrived, seconds, peaks


def _with_peaks(measure: Measure, peaks: Peaks, launcher: str) -> Measure:
    measure.host_pss, measure.gpu, measure.written = peaks.host_pss, peaks.gpu, sum(peaks.disk_growth.values())
    measure.weights = weight_bytes(DumpLayout.of(launcher).exported_program)
    return measure


def _measure_ours(proc: subprocess.CompletedProcess, tool: str, name: str, seconds: float) -> Measure:
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = next((e for e in events if e["event"] == "done"), None)
    if proc.returncode != 0 or done is None:
        return Measure(tool, name, f"exit {proc.returncode}", round(seconds, 1), None, None, note=proc.stderr[-300:])
    candidates = [e for e in events if e["event"] == "candidate" and not e["cached"]]
    original = next((e["seconds"] for e in candidates if e["nodes"] == done["start_nodes"]), None)
    final = next(
        (e["seconds"] for e in reversed(candidates) if e["nodes"] == done["nodes"] and e["verdict"] == "fails"), None
    )
    floor = round(original + final, 1) if original is not None and final is not None else None
    graphs = [e["graph"] for e in events if e["event"] == "checkpoint" and e["nodes"] == done["nodes"]]
    graph = hashlib.sha1(graphs[-1].encode()).hexdigest()[:12] if graphs else ""
    return Measure(
        tool,
        name,
        "ok",
        round(seconds, 1),
        done["queries"],
        done["nodes"],
        done["start_nodes"],
        floor,
        original=original,
        graph=graph,
    )


def run_triage(folder: str, name: str, workers: int, env: dict[str, str]) -> Measure:
    """`aoti-minify triage` on a copy minified already: the workaround search, the culprit, the reruns."""
    launcher = next(iter(glob.glob(os.path.join(folder, "**", "minifier_launcher.py"), recursive=True)), folder)
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "minifier",
            "triage",
            launcher,
            "--events",
            *(["--workers", str(workers)] if workers else []),
        ]
        + list(_run_args(name)),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    seconds = round(time.monotonic() - started, 1)
    with open(os.path.join(folder, TRIAGE_LOG), "w", encoding="utf-8") as f:
        f.write(proc.stderr)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    found = next((e["triage"] for e in events if e["event"] == "triage"), None)
    if proc.returncode != 0 or found is None:
        return Measure(
            "aoti-minify triage", name, f"exit {proc.returncode}", seconds, None, None, note=proc.stderr[-300:]
        )
    trials = sum(1 for e in events if e["event"] == "trial")
    first = wire.decode(Triage, found).workarounds[:1]
    workaround = first[0].describe() if first else f"none among {found['tried']}"
    measure = Measure("aoti-minify triage", name, "ok", seconds, trials, None, note=found["culprit"]["subsystem"])
    measure.workaround = workaround
    return measure


def run_once(dump_launcher: str, folder: str, name: str, env: dict[str, str]) -> Measure:
    """One `aoti-minify run`: a cold start, one compile and run of the whole graph."""
    launcher = relocate_dump(dump_launcher, folder)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "minifier", "run", launcher, "--events", *_run_args(name)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
    return Measure("aoti-minify run", name, status, round(time.monotonic() - started, 1), 1, None)


def end_fork_servers(folder: str) -> None:
    for log in logs_under(folder):
        with open(log, errors="replace") as f:
            for pid in forked_by(f.read()):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def row_text(row: Row) -> str:
    theirs, ours = row.theirs, row.ours
    text = (
        f"{ours.workload}: pytorch {_time(theirs)} q={theirs.queries} n={theirs.nodes} | "
        f"aoti-lens {_time(ours)} q={ours.queries} n={ours.nodes} (from {ours.start_nodes})"
    )
    if ours.done_s is not None:
        text += f" done at {ours.done_s:.1f} s, {ours.tail_s:.1f} s after the last checkpoint"
    for label, m in (
        ("warm", row.warm),
        ("no-slice", row.no_slice),
        ("slices-first", row.slices_first),
        ("run", row.one_run),
    ):
        if m is not None:
            text += f" | {label} {_time(m)} q={m.queries} n={m.nodes}"
    if row.triage is not None:
        text += f" | triage {_time(row.triage)} compiles={row.triage.queries} workaround {row.triage.workaround}"
    return text


def table(rows: list[Row]) -> str:
    lines = [
        "| workload | start nodes | PyTorch | aoti-lens | time ratio | query ratio | aoti-lens / (start-up + floor) "
        "| --no-slice | --slices-first | warm aoti-lens | warm / its floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        theirs, ours = row.theirs, row.ours
        lines.append(
            f"| {ours.workload} | {_v(ours.start_nodes)} | {_cell(theirs)} | {_cell(ours)} | "
            f"{_ratio(theirs.seconds, ours.seconds, theirs)} | {_ratio(theirs.queries, ours.queries, theirs)} | "
            f"{_of(ours.seconds, _sum(ours.start_up, ours.floor))} | {_cell(row.no_slice)} | "
            f"{_cell(row.slices_first)} | {_cell(row.warm)} | "
            f"{_of(row.warm.seconds, row.warm.floor) if row.warm else '-'} |"
        )
    return "\n".join(lines)


def footprint(rows: list[Row]) -> str:
    """Issue 44's: what each minifier held and wrote beside its time, against the dump's weights."""
    lines = [
        "## Memory and disk (issue 44)",
        "",
        "| workload | weights | tool | time | peak host PSS | peak GPU | dump folder's peak growth |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        for measure in (row.theirs, row.ours):
            if measure.host_pss is None:
                continue
            weights = measure.weights or 0
            lines.append(
                f"| {measure.workload} | {_gb(weights)} | {measure.tool} | {_time(measure)} "
                f"| {_of_weights(measure.host_pss, weights)} | {_of_weights(measure.gpu, weights)} "
                f"| {_of_weights(measure.written, weights)} |"
            )
    return "\n".join(lines)


def _gb(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e9:.2f} GB"


def _of_weights(size: int | None, weights: int) -> str:
    if not size:
        return "-"
    return f"{_gb(size)} ({size / weights:.2f}x)" if weights >= 100e6 else _gb(size)  # a ratio to MBs says nothing


def last_mile(rows: list[Row]) -> str:
    """Issue 33's: when `done` came against one reproduction of the same dump, and what followed the last
    checkpoint."""
    lines = [
        "## The last mile (issue 33)",
        "",
        "| workload | final nodes | done | exit | after the last checkpoint | one `aoti-minify run` | done / run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ours, run = row.ours, row.one_run
        if ours.status != "ok" or ours.done_s is None:
            continue
        ran = run is not None and run.status == "ok"
        lines.append(
            f"| {ours.workload} | {_v(ours.nodes)} | {ours.done_s:.1f} s | {ours.seconds:.1f} s | {_v(ours.tail_s)} s "
            f"| {_time(run) if run else '-'} | {f'{ours.done_s / run.seconds:.2f}x' if run and ran else '-'} |"
        )
    return "\n".join(lines)


def triage_targets(rows: list[Row]) -> str:
    """Issue 32's: what triage adds after the minify, beside three compiles of the original."""
    lines = [
        "## Triage (issue 32)",
        "",
        "| workload | workaround (verified on the original) | culprit | compiles | triage | start-up "
        "| (triage - start-up) / original compile |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        t, original, start = row.triage, row.ours.original, row.ours.start_up
        if t is None:
            continue
        work = t.seconds - (start or 0.0)  # a new process's start-up, as the minify's: a triage after it shares it
        ratio = f"{work / original:.1f}x" if original and t.status == "ok" else "-"
        lines.append(
            f"| {t.workload} | {t.workaround or t.status} | {t.note if t.status == 'ok' else '-'} | {_v(t.queries)} "
            f"| {t.seconds:.1f} s | {_v(start)} s | {ratio} |"
        )
    return "\n".join(lines)


def targets(rows: list[Row]) -> str:
    """Issue 13's targets, computed from this run's rows."""
    ok = [r for r in rows if r.ours.status == "ok"]
    lines = ["## Targets (issue 13)", ""]
    # the better of the two where both were measured, else the one that was (a device's minutes are few)
    compared = [
        (r, others, min(m.seconds for m in others))
        for r in ok
        if (others := [m for m in (r.no_slice, r.slices_first) if m and m.status == "ok"])
    ]
    met = [r for r, _, best in compared if r.ours.seconds <= 1.1 * best]
    lines.append(
        f"- minify <= 1.1x the better of --slices-first and --no-slice: {len(met)} of {len(compared)}: "
        + ", ".join(f"{r.ours.workload} {r.ours.seconds / best:.2f}x" for r, _, best in compared)
    )
    # The modes differ only after the original's verdict; start-up and that first compile vary with the
    # machine's load from one run to the next, so the same target on what follows them is printed too.
    after = [(r, _after_original(r.ours), [_after_original(m) for m in others]) for r, others, _ in compared]
    after = [(r, ours, min(theirs)) for r, ours, theirs in after if ours is not None and None not in theirs]
    lines.append(
        f"- the same, counting only what follows the original's verdict: "
        f"{sum(1 for _, ours, best in after if ours <= 1.1 * best)} of {len(after)}: "
        + ", ".join(f"{r.ours.workload} {ours:.1f} s vs {best:.1f} s" for r, ours, best in after)
    )
    big = [r for r in ok if (r.ours.start_nodes or 0) >= 100 and r.theirs.status != "skipped" and r.theirs.seconds]
    failed = [r for r in big if _gave_no_repro(r.theirs)]
    big = [r for r in big if r not in failed]
    fast = [r for r in big if r.theirs.seconds >= 5 * r.ours.seconds]
    lines.append(
        f"- >= 5x less wall time than PyTorch's minifier (>= 100 nodes): {len(fast)} of {len(big)}: "
        + ", ".join(f"{r.ours.workload} {_ratio(r.theirs.seconds, r.ours.seconds, r.theirs)}" for r in big)
        + "".join(
            f"; PyTorch's gave no repro on {r.ours.workload} ({r.theirs.status}, {r.theirs.seconds:.1f} s), ours did"
            for r in failed
        )
    )
    floors = [(r, _sum(r.ours.start_up, r.ours.floor)) for r in ok]
    floors = [(r, f) for r, f in floors if f]
    lines.append(
        f"- <= 2x (start-up + one compile of the original + one of the final graph): "
        f"{sum(1 for r, f in floors if r.ours.seconds <= 2 * f)} of {len(floors)}: "
        + ", ".join(f"{r.ours.workload} {r.ours.seconds / f:.1f}x" for r, f in floors)
    )
    runs = [r for r in ok if r.one_run and r.one_run.status == "ok" and _is_accuracy(r.ours.workload)]
    lines.append(
        "- accuracy failures <= 2.5x one `aoti-minify run`: "
        f"{sum(1 for r in runs if r.ours.seconds <= 2.5 * r.one_run.seconds)}"
        f" of {len(runs)}: "
        + ", ".join(
            f"{r.ours.workload} {r.ours.seconds / r.one_run.seconds:.1f}x of {r.one_run.seconds:.1f} s" for r in runs
        )
    )
    twice = [r for r in ok if len(r.repros) >= 2]
    same = [r for r in twice if len(set(r.repros)) == 1]
    lines.append(
        f"- the same dump minified twice gives the same repro: {len(same)} of {len(twice)}"
        + "".join(
            f"; {r.ours.workload} gave {len(set(r.repros))} repros in {len(r.repros)} runs"
            for r in twice
            if r not in same
        )
    )
    family = sorted(
        (r.ours.start_nodes, r.ours.queries, r.ours.workload)
        for r in ok
        if r.ours.workload.startswith("hf-bert") and r.ours.workload.endswith("relu-compile_error")
    )
    if len(family) >= 2:
        lines.append(
            "- queries against log2(n), one family from ~100 to ~2000 nodes: "
            + ", ".join(f"n={n}: {q} queries ({q / math.log2(n):.2f} per log2 n)" for n, q, _ in family)
        )
    return "\n".join(lines)


def _after_original(m: Measure) -> float | None:
    if m.start_up is None or m.original is None:
        return None
    return max(0.0, m.seconds - m.start_up - m.original)


def _of(seconds: float, floor: float | None) -> str:
    return f"{seconds / floor:.1f}x of {floor:.1f} s" if floor else "-"


def _sum(a: float | None, b: float | None) -> float | None:
    return a + b if a is not None and b is not None else None


def _time(m: Measure) -> str:
    if m.status == "skipped":
        return "not run"
    if m.status.startswith("timeout>"):
        return f"> {m.status.removeprefix('timeout>').removesuffix('s')} s"
    return f"{m.seconds:.1f} s" + ("" if m.status == "ok" else f" ({m.status})")


def _cell(m: Measure | None) -> str:
    """Time, queries, final nodes."""
    if m is None:
        return "-"
    if m.status == "skipped" or m.queries is None:
        return _time(m)
    return f"{_time(m)}, {m.queries} q, {_v(m.nodes)} n"


def _ratio(a, b, theirs: Measure) -> str:
    if not a or not b or theirs.status == "skipped":
        return "-"
    if _gave_no_repro(theirs):
        return "PyTorch's gave no repro"
    bound = "" if theirs.status == "ok" else ">"
    return f"{bound}{a / b:.1f}x"


def _gave_no_repro(theirs: Measure) -> bool:
    """PyTorch's minifier ended (crashed, or finished with no checkpoint) rather than being stopped at the cap:
    no time ratio is meaningful then."""
    return theirs.status not in ("ok", "skipped") and not theirs.status.startswith("timeout>")


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
    proc = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    return f"torch {proc.stdout.strip()}"


if __name__ == "__main__":
    sys.exit(main())
