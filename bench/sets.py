"""What the benchmark measures: the toy workloads and the real ones (minifier/examples/workloads.py), in sets."""

from __future__ import annotations

import glob
import os

from minifier.examples.workloads import WORKLOADS as REAL_WORKLOADS

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


HOMES = ("toy", "real", "real-bugs", "big")


def home_set(name: str) -> str:
    """The set whose results file holds the workload's measures."""
    if name in WORKLOADS:
        return "toy"
    workload = REAL_WORKLOADS[name]
    return "big" if workload.big else "real-bugs" if workload.failure_class.origin == "torch" else "real"


def results_name(name: str, machine: str, compiler: str) -> str:
    """The results file (bench/results/) of a workload's measures on a machine, under a compiler."""
    device = "cpu" if machine == "cpu" else "cuda"
    return f"{home_set(name)}-{device}{'' if compiler == 'aoti' else '-' + compiler}.jsonl"


def results_files(folder: str) -> list[str]:
    """The results files in `folder` that results_name names (beside them, bench/verify_workloads.py's checks)."""
    return sorted({path for home in HOMES for path in glob.glob(os.path.join(folder, f"{home}-*.jsonl"))})


def run_args(name: str) -> tuple[str, ...]:
    """What a real workload's runs need beyond its launcher (--import of its custom ops, --accuracy)."""
    return REAL_WORKLOADS[name].run_args if name in REAL_WORKLOADS else ()


def is_accuracy(name: str) -> bool:
    if name in REAL_WORKLOADS:
        return REAL_WORKLOADS[name].failure_class.accuracy
    return name in WORKLOADS and WORKLOADS[name][2] == "accuracy"
