"""The benchmark's tables and the issues' targets, computed from measures (bench/measures.py)."""

from __future__ import annotations

import math

from measures import Measure, Row
from sets import is_accuracy


def report(rows: list[Row]) -> str:
    """Every table and target, in the order a run prints them."""
    return "\n\n".join(part(rows) for part in (table, footprint, targets, last_mile, triage_targets))


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


def standing(rows: list[Row]) -> str:
    """bench/RESULTS.md's standing: each workload's latest aoti-lens run on each machine beside PyTorch's minifier in
    the same run, by machine, then workload."""
    lines = [
        "| device | workload | compiler | aoti-lens | PyTorch's minifier | PyTorch / aoti-lens "
        "| aoti-lens / (start-up + floor) | date | torch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in sorted(rows, key=lambda r: (r.ours.machine != "cpu", r.ours.machine, r.ours.workload)):
        theirs, ours = row.theirs, row.ours
        nodes = f"{ours.start_nodes} -> {_v(ours.nodes)} n" if ours.status == "ok" else ours.status
        lines.append(
            f"| {ours.machine.upper() if ours.machine == 'cpu' else ours.machine} | {ours.workload} | {ours.compiler} "
            f"| {_time(ours)}, {_v(ours.queries)} q, {nodes} | {cell(theirs)} "
            f"| {_ratio(theirs.seconds, ours.seconds, theirs)} | {_of(ours.seconds, _sum(ours.start_up, ours.floor))} "
            f"| {ours.date} | {ours.torch} |"
        )
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    lines = [
        "| workload | start nodes | PyTorch | aoti-lens | time ratio | query ratio | aoti-lens / (start-up + floor) "
        "| --no-slice | --slices-first | warm aoti-lens | warm / its floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        theirs, ours = row.theirs, row.ours
        lines.append(
            f"| {ours.workload} | {_v(ours.start_nodes)} | {cell(theirs)} | {cell(ours)} | "
            f"{_ratio(theirs.seconds, ours.seconds, theirs)} | {_ratio(theirs.queries, ours.queries, theirs)} | "
            f"{_of(ours.seconds, _sum(ours.start_up, ours.floor))} | {cell(row.no_slice)} | "
            f"{cell(row.slices_first)} | {cell(row.warm)} | "
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
    runs = [r for r in ok if r.one_run and r.one_run.status == "ok" and is_accuracy(r.ours.workload)]
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


def cell(m: Measure | None) -> str:
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
