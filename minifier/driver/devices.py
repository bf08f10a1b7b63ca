"""The GPUs the workers are spread over, and how many workers there are, found without importing torch."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from ..contract.archive import BIG_WEIGHTS, weight_bytes
from ..contract.launcher import LauncherSpec
from ..exchange.worker_protocol import GraphInfo
from ..processes.pool import Pool


def share_big_weights(pool: Pool, graph: GraphInfo, spec: LauncherSpec) -> None:
    """A big program on a GPU: one copy of its weights per GPU, which every worker there uses."""
    if graph.device != "cpu" and weight_bytes(spec.weights or spec.pt2) >= BIG_WEIGHTS:
        pool.share_weights()


def default_workers() -> int:
    """Compiling is CPU-bound, so several workers share a GPU: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1), len(default_devices()))


def cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def room_beside_a_compile() -> int:
    """How much other work the cores leave room for beside the first compile of a run: it holds about two cores
    (Inductor's Python, then the wrapper's and the kernels' g++ side by side) while the fork server imports
    Inductor beside it. Half the cores, less that compile: none on 2 cores."""
    return max(0, cores() // 2 - 1)


@functools.cache
def default_devices() -> list[str]:
    """GPUs the workers are spread over (round robin). Cached: the command line asks for it several
    times (worker and device defaults) and nvidia-smi is slow."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip().isdigit()]
