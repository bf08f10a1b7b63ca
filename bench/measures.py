"""The benchmark's records: one Measure per run of a tool on a workload (a line of a results file), and the Row
that gathers a workload's runs on one machine.

bench/results/ holds one file per set, device and compiler (`real-cpu.jsonl`, `toy-cuda.jsonl`,
`real-bugs-cpu-torch.compile.jsonl`): a new measure replaces the same run there (workload, tool, repeat, machine), so
each file holds the latest measure of every run, with its date, machine and torch. Earlier ones are in git's history.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass


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
    machine: str = ""  # "cpu" for a run on the CPU, else the GPU's model ("H100")
    date: str = ""
    torch: str = ""
    compiler: str = "aoti"  # who compiled the dump (bench/run.py --compiler)

    def key(self) -> tuple[str, str, int, str, str]:
        """What a later measure of the same run replaces it by."""
        return (self.workload, self.tool, self.repeat, self.machine, self.compiler)


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


TOOLS = {
    "pytorch": "theirs",
    "aoti-lens": "ours",
    "aoti-lens-warm": "warm",
    "aoti-lens --no-slice": "no_slice",
    "aoti-lens --slices-first": "slices_first",
    "aoti-minify run": "one_run",
    "aoti-minify triage": "triage",
}


def read_measures(paths: list[str]) -> list[Measure]:
    measures = []
    for path in paths:
        with open(path) as f:
            measures += [Measure(**json.loads(line)) for line in f if line.strip()]
    return measures


def read_rows(paths: list[str]) -> list[Row]:
    """Rows from results files, in their order; a measure in a later file replaces the same run in an earlier one."""
    return rows_of(read_measures(paths))


def rows_of(measures: list[Measure]) -> list[Row]:
    """One row per workload, machine and compiler that aoti-lens minified: of each run the last measure of every
    repeat, and of those the median by wall time."""
    found: dict[tuple[str, str, str], dict[str, dict[int, Measure]]] = {}
    for m in measures:
        found.setdefault((m.workload, m.machine, m.compiler), {}).setdefault(TOOLS[m.tool], {})[m.repeat] = m
    return [
        Row(
            **{
                "theirs": Measure("pytorch", workload, "skipped", 0, None, None, machine=machine, compiler=compiler),
                **{run: median(list(repeats.values())) for run, repeats in parts.items()},
            },
            repros=tuple(m.graph for run in ("ours", "warm") for m in parts.get(run, {}).values() if m.status == "ok"),
        )
        for (workload, machine, compiler), parts in found.items()
        if "ours" in parts
    ]


def median(measures: list[Measure]) -> Measure:
    """The lower middle measure by wall time: a real run, its queries and floor its own."""
    return sorted(measures, key=lambda m: m.seconds)[(len(measures) - 1) // 2]


def save(out: str, measures: list[Measure], timelines: list[str]) -> None:
    """`measures` as the results file `out`, and their workers' timelines beside it."""
    with open(out, "w") as f:
        f.writelines(json.dumps(asdict(m)) + "\n" for m in measures)
    with open(timeline_file(out), "w") as f:
        f.write("\n".join(timelines))


def merge_into(out: str, measures: list[Measure], timelines: list[str]) -> None:
    """`measures` into the results file `out`, each replacing the same run there; the timelines of their workloads
    likewise, a block replacing the block with the same header."""
    kept = {m.key(): m for m in (read_measures([out]) if os.path.exists(out) else [])}
    # a run that skipped PyTorch's minifier leaves its last measure in place
    kept.update((m.key(), m) for m in measures if m.status != "skipped" or m.key() not in kept)
    beside = timeline_file(out)
    blocks = _timeline_blocks(open(beside).read().splitlines()) if os.path.exists(beside) else {}
    workloads = {m.workload for m in measures}
    blocks.update((h, b) for h, b in _timeline_blocks(timelines).items() if h[2:].split(" (")[0] in workloads)
    save(out, list(kept.values()), [line for block in blocks.values() for line in block])


def timeline_file(results: str) -> str:
    return os.path.splitext(results)[0] + "-timeline.txt"


def _timeline_blocks(lines: list[str]) -> dict[str, list[str]]:
    """A timeline file's blocks, each from its `# workload (tool, in folder)` header on, by that header."""
    blocks: dict[str, list[str]] = {}
    header = ""
    for line in lines:
        if line.startswith("# "):
            header = line
        blocks.setdefault(header, []).append(line)
    return blocks
