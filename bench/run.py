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
original's kernels compiled, as a user's are after the failing run. Shared, the first of the modes would pay
the cold builds the next ones take from the cache. PyTorch's minifier uses the dump's own cache: its launcher
sets the variable.

With `--repeat N` the aoti-lens runs of a workload are made N times, their order reversed on every other
repeat, and each run's row shows its median (the lower middle one): the first run on a machine is slower
(bench/RESULTS.md), so one ordered pass would compare the order as much as the modes.

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
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from footprint import Footprint, Peaks
from measures import Measure, merge_into, read_measures, read_rows, rows_of, save, timeline_file
from sets import REAL_WORKLOADS, SETS, WORKLOADS, results_files, results_name, run_args
from tables import cell, report, row_text, standing
from timeline import run_marks, start_up, timeline

from minifier.contract import wire
from minifier.contract.archive import weight_bytes
from minifier.contract.artifacts import relocate_dump
from minifier.contract.events import Triage
from minifier.contract.launcher import read_launcher
from minifier.contract.layout import MINIFIER, REPRO_STANDALONE, TRIAGE_JSON, DumpLayout
from minifier.contract.procs import exit_text
from minifier.exchange.worklog import forked_by, logs_under

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
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
        "--out",
        default="",
        help="write every measure to this JSON-lines file (default: each into its set's file in bench/results/, "
        "replacing the same run there)",
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
    parser.add_argument(
        "--merge", nargs="+", metavar="JSONL", help="file the measures of --out files (a device's) in bench/results/"
    )
    parser.add_argument(
        "--standing", action="store_true", help="print bench/results/'s latest row of each workload on each machine"
    )
    args = parser.parse_args()
    if args.report:
        print(report(read_rows(args.report)))
        return 0
    if args.merge:
        file_measures(read_measures(args.merge), _timelines_beside(args.merge))
        return 0
    if args.standing:
        print(standing(read_rows(results_files(RESULTS))))
        return 0
    args.modes = chosen_modes(args, parser)
    chosen = [
        w
        for w in SETS[args.workload_set]
        if (w in WORKLOADS or REAL_WORKLOADS[w].device == args.device)
        and (not args.only or any(s in w for s in args.only.split(",")))
    ]
    scratch = tempfile.mkdtemp(prefix="aoti-bench-")
    measures: list[Measure] = []
    timelines: list[str] = []
    torch_version, gpu = _torch_and_gpu(args.device)
    stamp = dict(machine=gpu or "cpu", date=time.strftime("%Y-%m-%d"), torch=torch_version, compiler=args.compiler)

    def record(measure: Measure) -> None:
        measures.append(replace(measure, **stamp))
        print(f"{measure.workload}: {measure.tool} {cell(measure)}", flush=True)
        if args.out:
            save(args.out, measures, timelines)
        else:
            file_measures(measures[-1:], timelines)

    print(
        f"# {stamp['date']} {platform.node()} torch {torch_version} {gpu} device={args.device} "
        f"cores={os.cpu_count()} compiler={args.compiler}",
        flush=True,
    )
    try:
        launchers = dump_all(scratch, chosen, args.device, args.compiler)
        for name in launchers:
            measure_workload(name, launchers[name], os.path.join(scratch, name), args, timelines, record)
            print(*map(row_text, rows_of([m for m in measures if m.workload == name])), sep="\n", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{report(rows_of(measures))}\n\nresults: {args.out or RESULTS}")
    return 0


def file_measures(measures: list[Measure], timelines: list[str]) -> None:
    """Each measure into its set's file in bench/results/, with the timelines of its workload."""
    by_file: dict[str, list[Measure]] = {}
    for m in measures:
        by_file.setdefault(results_name(m.workload, m.machine, m.compiler), []).append(m)
    for name, found in by_file.items():
        merge_into(os.path.join(RESULTS, name), found, timelines)


def _timelines_beside(paths: list[str]) -> list[str]:
    found = [timeline_file(path) for path in paths if os.path.exists(timeline_file(path))]
    return [line for path in found for line in open(path).read().splitlines()]


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


DRIVER_LOG = "aoti-minify.log"  # what `aoti-minify minify` printed on stderr, beside its dump copy
TRIAGE_LOG = "aoti-minify-triage.log"  # what `aoti-minify triage` printed on stderr, beside the same copy


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
    extra += [*run_args(name), *options]
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
        + list(run_args(name)),
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
        [sys.executable, "-m", "minifier", "run", launcher, "--events", *run_args(name)],
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


def _torch_and_gpu(device: str) -> tuple[str, str]:
    """The torch in use, and on a GPU run the GPU's model as the results name it ("H100")."""
    probe = "import torch; print(torch.__version__)"
    if device == "cuda":
        probe += "; print(torch.cuda.get_device_name())"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    lines = proc.stdout.splitlines() + ["", ""]
    model = re.search(r"\b[A-Z]\d{2,4}\b", lines[1])
    return lines[0], model.group(0) if model else lines[1]


if __name__ == "__main__":
    sys.exit(main())
