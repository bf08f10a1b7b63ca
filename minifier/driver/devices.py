"""The GPUs the workers are spread over, how many workers there are, and the GPU memory their queries start
within, found without importing torch."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Collection

from ..contract.archive import BIG_WEIGHTS, weight_bytes
from ..contract.launcher import LauncherSpec
from ..exchange.worker_protocol import GraphInfo
from ..processes.pool import Pool

# What a worker takes on its GPU beside its query's tensors: its CUDA context, Triton's and Inductor's scratch.
WORKER_RESERVE = 1 << 30


def plan_gpu_memory(pool: Pool, graph: GraphInfo, spec: LauncherSpec) -> None:
    """A program on a GPU: a big one gets one copy of its weights per GPU, which every worker there uses
    (Pool.share_weights); and where its weights and values take a gigabyte or more, its queries start within what
    each GPU has free now, less what the workers and the held weights will take (Pool.memory_budget; a query that
    does not fit waits, unless nothing else runs). A smaller one's queries start at once, as ever."""
    if graph.device == "cpu" or need(graph, None, held=False) < BIG_WEIGHTS:
        return
    weights = weight_bytes(spec.weights or spec.pt2)
    held = weights if weights >= BIG_WEIGHTS else 0
    if held:
        pool.share_weights()
    free = free_gpu_memory(pool.config.devices)
    workers = Counter(pool.config.devices[i % len(pool.config.devices)] for i in range(pool.config.size))
    for device, available in free.items():
        pool.memory_budget[device] = available - (workers[device] + bool(held)) * WORKER_RESERVE - held


def need(graph: GraphInfo, kept: Collection[str] | None, held: bool) -> int:
    """The GPU bytes a query of the graph made of `kept` (None: the whole graph) asks for, at most: the weights its
    nodes read (none where they are held), the values it is fed and every value it makes. None on the host: the
    admission is for GPUs."""
    if graph.device == "cpu":
        return 0
    nodes = graph.by_name()
    chosen = [n for n in graph.nodes if n.kind == "compute" and (kept is None or n.name in kept)]
    made = {n.name for n in chosen}
    read = {a for n in chosen for a in n.args if a in nodes and a not in made}
    weights = sum(nodes[a].bytes for a in read if nodes[a].kind == "param")
    fed = sum(nodes[a].bytes for a in read if nodes[a].kind != "param")
    return (0 if held else weights) + fed + sum(n.bytes for n in chosen)


def reference_need(graph: GraphInfo) -> int:
    """What comparing a run of the whole graph with eager adds on its GPU where the weights are in half precision: the
    fp32 copy of them that stands in for the fp64 reference (minifier.processes.accuracy), twice their bytes."""
    if graph.device == "cpu":
        return 0
    return sum(2 * n.bytes for n in graph.nodes if n.kind == "param" and n.shape.startswith(("bfloat16[", "float16[")))


def free_gpu_memory(devices: list[str]) -> dict[str, int]:
    """Each GPU's free bytes now, as nvidia-smi counts them (none where it cannot say)."""
    free = {}
    for device in devices:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", device],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.isdigit():
            free[device] = int(out) << 20
    return free


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
