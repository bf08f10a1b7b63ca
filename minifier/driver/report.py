"""`aoti-minify report`: a PyTorch bug report of a minimized failure, written as report.md beside repro.py.

Laid out like PyTorch's bug-report issue template ("Describe the bug" with a minimal repro, then
"Versions"): the failure's signature and an excerpt of its error, the minimal graph, the standalone
repro inline (repro_standalone.py when there is one, else repro.py, which loads repro.pt2 beside
it), the launcher's config that differs from the defaults, and the environment the template asks
for. Torch-free: the versions come from `python -m minifier.program.environment` in a child process.
It is meant to be pasted into a public issue: this machine's folders in it (the Inductor cache, the Python
environment, the workspace, the home folder) are written as short placeholders (`<inductor cache>/...`);
the repro it holds names no path at all.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from ..contract.artifacts import read_repro_graph, rebuilt_standalone
from ..contract.calls import CALLS, CompileCall
from ..contract.events import (
    DoneEvent,
    EventsTail,
    Failure,
    Triage,
    last_run,
    load_failure,
    load_triage,
    load_versions,
)
from ..contract.launcher import LauncherSpec, read_launcher
from ..contract.layout import DEBUG_DIR, DumpLayout
from ..contract.procs import PACKAGE_PARENT, with_this_package

ENVIRONMENT_TIMEOUT = 300.0
EXCERPT_LINES = 25
_CHECKPOINT_HEADER = re.compile(r"^# aoti-lens checkpoint: (\d+) of (\d+) graph nodes", re.M)


class NothingToReport(ValueError):
    """There is no repro yet; the message says what to run."""


@dataclass(frozen=True)
class Report:
    path: str
    text: str


def error_excerpt(details: str, limit: int = EXCERPT_LINES) -> str:
    """The lines of an error text that say what went wrong: its first line and each compiler `error`
    line with the two after it (the source line and the caret), else the end of a traceback."""
    lines = details.strip().splitlines()
    if not lines:
        return ""
    picked: list[int] = [0]
    for i, line in enumerate(lines):
        if re.search(r"\berror\b", line, re.I) and not re.search(r"\bwarning\b", line, re.I) and i:
            picked += [i, i + 1, i + 2]
    if len(picked) == 1:
        picked += range(max(1, len(lines) - limit + 1), len(lines))
    kept = [lines[i] for i in sorted(set(picked)) if i < len(lines)][:limit]
    return "\n".join(kept)


def _fence(text: str, language: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{language}\n{text.rstrip()}\n{ticks}"


def _shrink(layout: DumpLayout) -> DoneEvent | None:
    """The last minify's `done`, or where its events are gone (the dump copied elsewhere), repro.py's header."""
    done = [e for e in last_run(EventsTail(layout.events_log).read().events) if isinstance(e, DoneEvent)]
    if done:
        return done[-1]
    try:
        with open(layout.repro_py, encoding="utf-8") as f:
            found = _CHECKPOINT_HEADER.search(f.read())
    except OSError:
        return None
    if found is None:
        return None
    return DoneEvent(nodes=int(found[1]), repro=layout.repro_py, queries=0, seconds=0.0, start_nodes=int(found[2]))


def environment(spec: LauncherSpec) -> dict[str, Any]:
    """The versions, from a child process that imports torch; {"error": ...} when it cannot."""
    assignments = [[a.module, a.attr, repr(a.value)] for a in spec.config]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "minifier.program.environment"],
            input=json.dumps(assignments),
            capture_output=True,
            text=True,
            timeout=ENVIRONMENT_TIMEOUT,
            env=with_this_package(os.environ),
            cwd=PACKAGE_PARENT,
        )  # no workspace module shadows ours
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"could not collect the environment: {e}"}
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"error": f"could not collect the environment: {proc.stderr.strip()[-500:] or 'no output'}"}


def _versions(env: dict[str, Any], failure: Failure | None) -> list[str]:
    if "error" in env:
        torch = failure.torch_version if failure else "?"
        return [f"torch {torch} (from failure.json); {env['error']}", ""]
    gpus = ", ".join(env["gpus"]) or "none"
    rows = [
        ("torch", env["torch"]),
        ("CUDA", env["cuda"] or "none (CPU build)"),
        ("Triton", env["triton"] or "none"),
        ("GPU", gpus),
        ("C++ compiler", env["cxx"]),
        ("Python", env["python"]),
        ("platform", env["platform"]),
    ]
    if failure:
        rows.append(("failed on", failure.device))
    lines = ["| | |", "| --- | --- |", *[f"| {k} | {str(v).replace('|', '/')} |" for k, v in rows], ""]
    return lines + [
        "<details><summary>python -m torch.utils.collect_env</summary>",
        "",
        _fence(env["collect_env"]),
        "",
        "</details>",
        "",
    ]


def _config(spec: LauncherSpec, env: dict[str, Any]) -> list[str]:
    changed = set(env.get("non_default", range(len(spec.config))))
    lines = [f"{a.module}.{a.attr} = {a.value!r}" for i, a in enumerate(spec.config) if i in changed]
    lines += [f"os.environ[{k!r}] = {v!r}" for k, v in spec.env.items() if v is not None]
    if spec.config_patches:
        lines.append(f"config_patches = {spec.config_patches!r}")
    if not lines:
        return ["The launcher sets no config beyond the defaults.", ""]
    source = "this torch's defaults" if "non_default" in env else "the defaults (not checked: no torch here)"
    return [f"What the launcher sets that differs from {source}:", "", _fence("\n".join(lines), "python"), ""]


def machine_folders(spec: LauncherSpec, layout: DumpLayout) -> list[tuple[str, str]]:
    """(folder of this machine, its placeholder), the longest folder first so that one inside another is named
    for the inner one: the Inductor cache (the launcher's, else Inductor's default), the Python environment, the
    workspace (the folder holding the dump's torch_compile_debug/), the home folder."""
    cache = spec.env.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{_user()}")
    debug_dir = os.path.dirname(layout.run_dir)
    folders = [(cache, "<inductor cache>"), (sys.prefix, "<python env>"), (os.path.expanduser("~"), "~")]
    if os.path.basename(debug_dir) == DEBUG_DIR:
        folders.append((os.path.dirname(debug_dir), "<workspace>"))
    kept = [(os.path.normpath(folder), name) for folder, name in folders if folder and folder != os.sep]
    return sorted(kept, key=lambda pair: len(pair[0]), reverse=True)


def with_placeholders(text: str, folders: list[tuple[str, str]]) -> str:
    """`text` with each folder (and what lies below it) written as its placeholder; a folder matches only whole
    (`/home/ann` is not replaced inside `/home/anna`)."""
    for folder, name in folders:
        # the placeholder as a function: a replacement string would read its backslashes as escapes
        text = re.sub(re.escape(folder) + r"(?=[/\s'\"`:),\]]|$)", functools.partial(_named, name), text, flags=re.M)
    return text


def _named(name: str, _: re.Match[str]) -> str:
    return name


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name, no passwd entry
        return "unknown"


# Per kind of launcher: the report's title, the failing entry point, what was minimized
_FAILED_CALLS = {
    "aoti": ("AOTI failure", "torch._inductor.aoti_compile_and_package / aoti_load_package", "the exported program"),
    "after_aot": ("torch.compile failure", "torch.compile", "the graph Inductor compiles (after AOT autograd)"),
}


def render(spec: LauncherSpec, layout: DumpLayout, failure: Failure | None, env: dict[str, Any]) -> str:
    repro = rebuilt_standalone(layout) or layout.repro_py
    with open(repro, encoding="utf-8") as f:
        repro_text = f.read()
    graph = read_repro_graph(layout.repro_py) or "(repro.py holds no readable graph)"
    shrink = _shrink(layout)
    title, entry, graph_of = _FAILED_CALLS[spec.kind]
    signature = (
        failure.signature.describe()
        if failure
        else (shrink.signature.describe() if shrink and shrink.signature else title)
    )
    lines = [f"# {title}: {signature}", "", "### Describe the bug", "", f"`{entry}` fails with `{signature}`."]
    if shrink:
        lines[-1] += (
            f" aoti-lens minimized {graph_of} from {shrink.start_nodes} to {shrink.nodes} "
            f"graph node{'s' if shrink.nodes != 1 else ''}; the repro below fails the same way."
        )
    lines.append("")
    if failure:
        lines += ["Error:", "", _fence(f"{failure.headline}\n\n{error_excerpt(failure.details)}"), ""]
        if failure.kernel and failure.kernel.name:
            ops = ", ".join(failure.kernel.aten_ops) or "?"
            lines += [f"Failing kernel: `{failure.kernel.name}` (ATen ops: {ops}).", ""]
    count = f"{shrink.nodes} node{'s' if shrink.nodes != 1 else ''}" if shrink else "? nodes"
    lines += [f"Minimal graph ({count}):", "", _fence(graph, "python"), ""]
    name = os.path.basename(repro)
    note = " (loads `repro.pt2` beside it: attach that file too)" if repro == layout.repro_py else ""
    repro_part = [f"Repro, `{name}`{note}: run `python {name}`.", "", _fence(repro_text, "python"), ""]
    after = [*triage_sections(_triage(layout), CALLS[spec.kind]), "Config:", "", *_config(spec, env)]
    after += ["### Versions", "", *_versions(env, failure), *_releases(layout)]
    folders = machine_folders(spec, layout)
    # the repro as it is: it names no path of this machine, and must run as pasted
    return "\n".join(
        [with_placeholders("\n".join(lines), folders), *repro_part, with_placeholders("\n".join(after), folders)]
    )


def _releases(layout: DumpLayout) -> list[str]:
    """What `aoti-minify versions` found, as the bug template asks (reproduces on, first bad, last good)."""
    try:
        found = load_versions(layout.versions_json)
    except (OSError, ValueError):
        return []
    return ["", f"Releases (aoti-lens versions, each in a fresh environment): {found.line()}.", ""]


def _triage(layout: DumpLayout) -> Triage | None:
    try:
        return load_triage(layout.triage_json)
    except (OSError, ValueError):
        return None


def triage_sections(triage: Triage | None, call: CompileCall) -> list[str]:
    """What `aoti-minify triage` found: the culprit, and each verified workaround as the call that ships it."""
    if triage is None:
        return []
    culprit = triage.culprit
    runs = f"The original failed in {triage.failures} of {triage.runs} unchanged runs" + (
        "." if triage.deterministic else ": the failure is not deterministic."
    )
    lines = ["### Culprit", "", f"Ops of the minimal graph: {', '.join(f'`{op}`' for op in culprit.ops) or '?'}."]
    lines += [f"Phase: {culprit.phase}. Subsystem: {culprit.subsystem}.", ""]
    lines += [f"{culprit.detail[:1].upper()}{culprit.detail[1:]}.", ""] if culprit.detail else []
    lines += [runs, "", "### Workaround", ""]
    if not triage.workarounds:
        return [*lines, f"None found among {triage.tried} Inductor config changes tried (aoti-lens triage).", ""]
    for workaround in triage.workarounds:
        error = "" if workaround.max_abs_error is None else f", max abs error {workaround.max_abs_error:.2g} vs eager"
        shipped = call.shipped(workaround.inductor_configs)
        if workaround.code:
            shipped = f"{workaround.code}\n{call.shipped({})}"
        lines += [
            f"Verified on the original model by aoti-lens triage ({workaround.family}: compiles, runs and matches "
            f"eager{error}):",
            "",
            _fence(shipped, "python"),
            "",
        ]
    return lines


def write_report(launcher: str, output: str | None = None, versions: bool = True) -> Report:
    spec = read_launcher(launcher, require_pt2=False)
    layout = spec.layout()
    if not (os.path.isfile(layout.repro_py) or os.path.isfile(layout.repro_standalone)):
        raise NothingToReport(f"{layout.root} has no repro.py yet: run `aoti-minify minify {spec.path}` first")
    try:
        failure = load_failure(layout.failure_json)
    except (OSError, ValueError):
        failure = None
    env = environment(spec) if versions else {"error": "not collected (--no-versions)"}
    text = render(spec, layout, failure, env)
    path = output or layout.report_md
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return Report(path=path, text=text)
