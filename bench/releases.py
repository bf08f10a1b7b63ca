"""The real-bug corpus across torch releases (issue 48): each bug's workload dumped, minified, and its minimal repro
run by `aoti-minify versions` (by default its bisection from the newest release), in one run.

    python bench/releases.py                          # every CPU workload of bench/run.py's real-bugs set
    python bench/releases.py --only nn-mlp- --find-links /opt/wheels

Prints one row per bug (first bad, last good, fixed in, what each release tried did, the time) and writes each bug's
versions.json, with the workload's name and the run's wall time, to bench/results/releases-<device>.jsonl (a bug
run again replaces its line). Nothing here is asserted: it measures.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from run import RESULTS, dump
from sets import REAL_WORKLOADS, SETS, run_args


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--versions-args", default="", help="more `aoti-minify versions` options, space-separated")
    parser.add_argument("--find-links", default="", help="passed to `aoti-minify versions`")
    args = parser.parse_args()
    wanted = [s for s in args.only.split(",") if s]
    chosen = [
        name
        for name in SETS["real-bugs"]
        if REAL_WORKLOADS[name].device == args.device and (not wanted or any(s in name for s in wanted))
    ]
    out = os.path.join(RESULTS, f"releases-{args.device}.jsonl")
    found = _read(out)
    scratch = tempfile.mkdtemp(prefix="aoti-releases-")
    extra = [*(["--find-links", args.find_links] if args.find_links else []), *args.versions_args.split()]
    try:
        for name in chosen:
            found[name] = bisected(name, os.path.join(scratch, name), args.device, extra)
            print(row(found[name]), flush=True)
            with open(out, "w") as f:
                f.writelines(json.dumps(entry) + "\n" for entry in found.values())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("\n| workload | bug's first bad release | last good | fixed in | releases run | time |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(*(row(found[name]) for name in chosen), sep="\n")
    return 0


def bisected(name: str, folder: str, device: str, extra: list[str]) -> dict:
    """Dump, minify, then `versions`: versions.json with the workload's name and the versions run's wall time, or
    why a step failed."""
    launcher = dump(os.path.join(folder, "dump"), name, device)
    minified = _aoti_minify("minify", launcher, *run_args(name))
    if minified.returncode != 0:
        return {"workload": name, "error": f"minify: {minified.stderr.strip().splitlines()[-1:]}"}
    started = time.monotonic()
    versions = _aoti_minify("versions", launcher, "--events", *extra)
    seconds = round(time.monotonic() - started, 1)
    if versions.returncode != 0:
        return {"workload": name, "error": f"versions: {versions.stderr.strip().splitlines()[-1:]}", "seconds": seconds}
    events = [json.loads(line) for line in versions.stdout.splitlines() if line.startswith("{")]
    path = next(e["path"] for e in events if e.get("event") == "versions")
    return {"workload": name, "seconds": seconds, **json.load(open(path))}


def row(entry: dict) -> str:
    if "error" in entry:
        return f"| {entry['workload']} | {entry['error']} | | | | |"
    runs = ", ".join(f"{r['release']} {r['verdict'].replace('_', ' ')}" for r in entry["runs"])
    cells = (entry.get(k) or "-" for k in ("first_bad", "last_good", "fixed_in"))
    return f"| {entry['workload']} | {' | '.join(cells)} | {runs} | {entry['seconds']:.0f} s |"


def _aoti_minify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minifier", *args], capture_output=True, text=True)


def _read(path: str) -> dict[str, dict]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {entry["workload"]: entry for entry in map(json.loads, filter(str.strip, f))}


if __name__ == "__main__":
    sys.exit(main())
