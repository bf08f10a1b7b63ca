"""Checks the real-model workloads: PyTorch dumps each, and `aoti-minify run` reproduces it.

    python bench/verify_workloads.py                   # every workload of this device (default cpu)
    python bench/verify_workloads.py --device cuda     # the H200 set
    python bench/verify_workloads.py --only hf-bert3,keyerror --out results.jsonl

For each workload (minifier/examples/workloads.py): dump it with PyTorch's own minifier dump, run
`aoti-minify run --events` on the launcher once, and print a table of compute nodes, whether it dumped,
whether the run reproduced it (exit 0), the seconds of that run and the signature it found.
Nothing is asserted: it reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from minifier.examples.workloads import WORKLOADS, Workload  # noqa: E402


@dataclass
class Check:
    workload: str
    model: str
    family: str
    failure: str
    origin: str
    device: str
    nodes: int | None = None
    dumped: bool = False
    reproduced: bool = False
    run_seconds: float | None = None
    kind: str = ""
    signature: str = ""
    note: str = ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--out", default="", help="also write the checks as JSON lines here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (its path is printed)")
    args = parser.parse_args()
    chosen = [
        w
        for w in WORKLOADS.values()
        if w.device == args.device and (any(s in w.name for s in args.only.split(",")) if args.only else not w.big)
    ]
    scratch = tempfile.mkdtemp(prefix="aoti-workloads-")
    checks = []
    try:
        for workload in chosen:
            checks.append(check(workload, os.path.join(scratch, workload.name)))
            print(json.dumps(asdict(checks[-1])), flush=True)
    finally:
        if args.out:
            with open(args.out, "w") as f:
                f.writelines(json.dumps(asdict(c)) + "\n" for c in checks)
        if args.keep:
            print(f"scratch: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(checks))
    return 0


def check(workload: Workload, folder: str) -> Check:
    result = Check(
        workload.name, workload.model, workload.family, workload.failure, workload.failure_class.origin, workload.device
    )
    dump = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", folder, *workload.dump_args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if dump.returncode != 0:
        result.note = "no dump: " + " / ".join(dump.stderr.strip().splitlines()[-2:])[-300:]
        return result
    result.dumped = True
    launcher = dump.stdout.strip().splitlines()[-1]
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "minifier", "run", launcher, "--events", *workload.run_args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    result.run_seconds = round(time.monotonic() - started, 1)
    result.reproduced = run.returncode == 0
    failure = _failure(os.path.dirname(launcher))
    if failure:
        result.nodes = failure.get("nodes")
        signature = failure.get("signature", {})
        result.kind = signature.get("kind", "")
        result.signature = f"{signature.get('exc_type')}: {signature.get('message')}"[:160]
    if not result.reproduced:
        result.note = f"run exit {run.returncode}: " + " / ".join(run.stderr.strip().splitlines()[-2:])[-300:]
    return result


def _failure(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, "failure.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table(checks: list[Check]) -> str:
    lines = [
        "| workload | model | family | failure | origin | device | compute nodes | dumps | run reproduces | "
        "one run (s) | kind | signature |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in checks:
        signature = c.signature.replace("|", "\\|") or c.note.replace("|", "\\|")
        lines.append(
            f"| {c.workload} | {c.model} | {c.family} | {c.failure} | {c.origin} | {c.device} | "
            f"{c.nodes or '-'} | "
            f"{'yes' if c.dumped else 'no'} | {'yes' if c.reproduced else 'no'} | {c.run_seconds or '-'} | "
            f"{c.kind or '-'} | {signature} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
