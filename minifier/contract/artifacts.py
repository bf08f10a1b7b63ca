"""The files the minifier writes (where: minifier.contract.layout), and reads back.

Everything goes inside the failure's own `minifier/` folder (or `--output-dir`): failure.json,
`checkpoints/<N>.py` each beside its own `<N>.pt2` (PyTorch's overwrite one shared file, so its old
checkpoints silently load the newest graph), the final repro.py + repro.pt2, and a scratch folder.
Checkpoints and repro.py use PyTorch's own `run_repro` format: they run with plain torch, and
`python repro.py minify` hands them to PyTorch's minifier if anyone wants to compare.

Every file is written beside itself as `<name>.tmp` and renamed into place, a checkpoint's program
before its script: a run killed, or a disk filling up, mid-write leaves the previous version whole
and at most a `.tmp` file, which the next run on the dump removes (`recover`). Torch-free.

A checkpoint of a big program holds no copy of the original's weights (minifier.program.weights saves them as
one-element views): its script calls `restore_weights`, which reads them from the original .pt2, named relative
to the script (or by AOTI_LENS_WEIGHTS).
"""

from __future__ import annotations

import ast
import errno
import os
import re
import shutil
import zipfile

from . import wire
from .archive import refers_to_original
from .events import Failure
from .launcher import HERE, RESTORE_WEIGHTS, LauncherSpec
from .layout import REPRO_PY, SCRATCH, DumpLayout, checkpoint_nodes, program_of, run_folder

TMP = ".tmp"
_FULL = (errno.ENOSPC, errno.EDQUOT)
# The first line of a repro.py written by a minification that was stopped before its end.
STOPPED_MARK = "# aoti-lens: the minification was stopped here: this is its best checkpoint, not yet a minimal repro"


class OutputError(OSError):
    """The output folder cannot be written."""


class DiskFull(OutputError):
    """The output folder's disk (or quota) is full."""


def output_error(path: str, error: OSError) -> OutputError:
    if error.errno in _FULL:
        return DiskFull(
            f"cannot write {path}: {error.strerror} (free some space, or pass --output-dir DIR); "
            "the checkpoints written so far are intact"
        )
    return OutputError(
        f"cannot write {path}: {error.strerror} (read-only debug folder? pass --output-dir DIR "
        "to write the minifier's outputs elsewhere)"
    )


def prepare(layout: DumpLayout, inputs: list[str]) -> None:
    """Make the output folders; refuse outputs that would overwrite one of `inputs` (the launcher, its .pt2)."""
    clash = [
        path
        for path in inputs
        if path in layout.outputs()
        or (os.path.dirname(path) == layout.checkpoints and checkpoint_nodes(os.path.basename(path)) is not None)
    ]
    if clash:
        raise OutputError(
            f"the outputs would overwrite the input {clash[0]}; pass --output-dir DIR to write them elsewhere"
        )
    for folder in (layout.root, layout.checkpoints, layout.work, layout.candidates):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            hint = (
                "" if e.errno == errno.ENOENT else "; pass --output-dir DIR to write the minifier's outputs elsewhere"
            )
            raise (DiskFull if e.errno in _FULL else OutputError)(f"cannot create {folder}: {e.strerror}{hint}") from e
        if not os.access(folder, os.W_OK):
            raise OutputError(
                f"{folder} is not writable (read-only debug folder?); "
                "pass --output-dir DIR to write the minifier's outputs elsewhere"
            )


def clean_scratch(layout: DumpLayout) -> None:
    for folder in (layout.candidates, layout.caches):
        shutil.rmtree(folder, ignore_errors=True)
    try:
        os.remove(layout.values)
    except OSError:
        pass


def complete_checkpoint(script: str) -> bool:
    """A checkpoint (or repro.py) whose program is whole: a .pt2 is a zip archive, and a cut one has no
    central directory at its end."""
    return os.path.isfile(script) and zipfile.is_zipfile(program_of(script))


def recover(layout: DumpLayout) -> list[str]:
    """Before a run, with the dump's lock held: remove what an earlier run killed mid-write left behind
    (`.tmp` files, checkpoints whose program is cut short, the scratch folder's candidates, packages and
    caches). Returns the files that were outputs, for the log."""
    removed = []
    for folder in (layout.root, layout.checkpoints):
        for name in _listdir(folder):
            path = os.path.join(folder, name)
            if name.endswith(TMP) and _remove(path):
                removed.append(path)
    for name in _listdir(layout.checkpoints):
        path = os.path.join(layout.checkpoints, name)
        if checkpoint_nodes(name) is not None and not complete_checkpoint(path):
            removed += [p for p in (path, program_of(path)) if _remove(p)]
    for folder in (layout.candidates, layout.packages):
        for name in _listdir(folder):
            _remove(os.path.join(folder, name))
    shutil.rmtree(layout.caches, ignore_errors=True)
    return removed


def relocate_dump(launcher: str, dest: str, name: str | None = None, link: bool = False) -> str:
    """Copy a dump's whole run folder to `dest/torch_compile_debug/<name>`; PyTorch's launcher names
    its .pt2 and save_dir by absolute path, so the copy's launcher is rewritten to use its own. `link`: hard
    links, not copies, for a reader that writes no file in place (aoti-minify replaces what it writes)."""
    layout = DumpLayout.of(launcher)
    run_dir, target = layout.run_dir, run_folder(dest, name or layout.run_name)
    copy = os.link if link else shutil.copy2
    shutil.copytree(run_dir, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(SCRATCH), copy_function=copy)
    copied = os.path.join(target, os.path.relpath(layout.launcher, run_dir))
    with open(copied, encoding="utf-8") as f:
        text = f.read()
    write_text(copied, text.replace(run_dir, target))
    return copied


def write_failure(layout: DumpLayout, failure: Failure) -> str:
    write_text(layout.failure_json, wire.dumps(failure) + "\n")
    return layout.failure_json


def write_checkpoint(
    layout: DumpLayout,
    spec: LauncherSpec,
    accuracy: str,
    nodes: int,
    pt2: str,
    graph_code: str,
    header: list[str],
    imports: list[str],
) -> str:
    path = layout.checkpoint_py(nodes)
    _copy(pt2, program_of(path))
    weights = os.path.relpath(spec.weights or spec.pt2, os.path.dirname(path)) if refers_to_original(pt2) else None
    write_text(
        path, render_repro(spec, os.path.basename(program_of(path)), accuracy, graph_code, header, imports, weights)
    )
    return path


def write_repro(layout: DumpLayout, checkpoint_py: str, stopped: bool = False) -> str:
    """repro.py is the last checkpoint, renamed so that it finds its own repro.pt2; `stopped` marks
    the best checkpoint of a minification that did not reach its end."""
    _copy(program_of(checkpoint_py), layout.repro_pt2)
    with open(checkpoint_py, encoding="utf-8") as f:
        text = f.read()
    text = text.replace(
        _pt2_line(os.path.basename(program_of(checkpoint_py))), _pt2_line(os.path.basename(layout.repro_pt2))
    )
    original = weights_of(text, checkpoint_py)
    if original is not None:
        text = _with_weights_at(text, os.path.relpath(original, os.path.dirname(layout.repro_py)))
    write_text(layout.repro_py, f"{STOPPED_MARK}\n{text}" if stopped else text)
    return layout.repro_py


def repro_stopped(path: str) -> bool:
    """Whether repro.py is a stopped minification's best checkpoint rather than its end."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\n") == STOPPED_MARK
    except (OSError, UnicodeDecodeError):
        return False


def copy_repro(layout: DumpLayout, destination: str) -> str:
    try:
        os.makedirs(destination, exist_ok=True)
    except OSError as e:
        raise output_error(destination, e) from e
    for path in (layout.repro_pt2, layout.repro_standalone):
        if os.path.exists(path):
            _copy(path, os.path.join(destination, os.path.basename(path)))
    with open(layout.repro_py, encoding="utf-8") as f:
        text = f.read()
    original = weights_of(text, layout.repro_py)
    if original is not None:  # the weights it reads go with it (linked where the file system allows)
        _link_or_copy(original, os.path.join(destination, os.path.basename(original)))
        text = _with_weights_at(text, os.path.basename(original))
    write_text(os.path.join(destination, os.path.basename(layout.repro_py)), text)
    return os.path.join(destination, os.path.basename(layout.repro_py))


def render_repro(
    spec: LauncherSpec,
    pt2_name: str,
    accuracy: str,
    graph_code: str,
    header: list[str],
    imports: list[str],
    weights: str | None = None,
) -> str:
    """A checkpoint's script; `weights`: the original program its .pt2 refers to, relative to the script."""
    hand_on = "  (add `minify` to hand it to PyTorch's own minifier)" if spec.kind == "aoti" else ""
    lines = [f"# {h}" for h in header]
    lines += ["#", f"# Run: python <this file>{hand_on}", ""]
    lines += [f"# {ln}" if ln else "#" for ln in graph_code.splitlines()]
    lines += ["", *_settings(spec, imports)]
    lines += ["", *(_RESTORE_WEIGHTS_DEF if weights else [])]
    lines += [
        _pt2_line(pt2_name),
        *([_weights_line(weights)] if weights else []),
        f"config_patches = {spec.portable().config_patches!r}",
    ]
    if spec.kind == "after_aot":
        lines += ["", "", *_compile_def(spec.dynamo_graph), *_RUN_AS_TORCH_COMPILE, ""]
    lines += [
        "if __name__ == '__main__':",
        *(["    from torch._dynamo.repro.aoti import run_repro"] if spec.kind == "aoti" else []),
        "    with torch.no_grad():",
        f"        run_repro(exported_program, config_patches=config_patches, accuracy={accuracy or False!r}, "
        f"command='run', save_dir=None, check_str={spec.check_str!r})",
        "",
    ]
    return "\n".join(lines)


def render_standalone(spec: LauncherSpec, accuracy: str, code: str, header: list[str], imports: list[str]) -> str:
    """repro_standalone.py: the graph as code (standalone.py wrote `code`), the launcher's settings, and a
    main that compiles and runs it as the minifier did: exported with the original's dynamic dims, compiled and
    loaded by AOTI, or compiled as torch.compile compiles its graph."""
    export = "program = torch.export.export(model, inputs, dynamic_shapes=DYNAMIC_SHAPES)"
    if spec.kind == "after_aot":
        compile_lines = [export, "eager, compiled = compiled_as_torch_compile(program, inputs, CONFIG_PATCHES)"]
    else:
        compile_lines = [
            export,
            "package = torch._inductor.aoti_compile_and_package(program, inductor_configs=CONFIG_PATCHES)",
            "compiled = torch._inductor.aoti_load_package(package)",
            "eager = program.module()",
        ]
    check = _checked(accuracy, "eager", "compiled", "inputs")
    lines = [f"# {h}" for h in header]
    lines += ["#", "# One file, plain PyTorch: python <this file>", ""]
    lines += _settings(spec, imports)
    lines += [
        "from math import inf, nan",
        "from torch import device",
        "from torch.export import Dim",
        "import torch.fx._pytree as fx_pytree",
        "import torch.utils._pytree as pytree",
        "NoneType = type(None)",
        "",
        f"CONFIG_PATCHES = {spec.portable().config_patches!r}",
        "",
        "",
        *(_compile_def(spec.dynamo_graph) if spec.kind == "after_aot" else []),
        code.rstrip(),
        "",
        "",
        "if __name__ == '__main__':",
        "    model = Repro()",
        "    inputs = make_inputs()",
        "    with torch.no_grad():",
        *(f"        {line}" for line in compile_lines + check),
        "",
    ]
    return "\n".join(lines)


def _compile_def(dynamo_graph: bool) -> list[str]:
    """The scripts' copy of minifier.program.after_aot.compile_graph, which the workers compile with: it returns
    eager (an after_aot graph as a GraphModule, as the minifier compares it: same_two_models casts a graph's dtype
    arguments to fp64) and the compiled graph, both called with the inputs."""
    if dynamo_graph:
        compiled = [
            "    from torch._inductor.compile_fx import compile_fx",
            "    with torch._inductor.config.patch(patches):  # all of torch.compile's Inductor backend, as for Dynamo",
            "        return program.module(), compile_fx(program.module(), values if symbolic else list(inputs))",
        ]
    else:
        compiled = [
            "    from torch._guards import detect_fake_mode",
            "    from torch._inductor.compile_fx import compile_fx_inner",
            "    from torch.fx.experimental.proxy_tensor import make_fx",
            "    if symbolic:",
            "        with detect_fake_mode(values):",
            "            graph, example = make_fx(program.module())(*values), values",
            "    else:",
            "        graph, example = make_fx(program.module(), tracing_mode='real')(*inputs), list(inputs)",
            "    with torch._inductor.config.patch(patches):  # Inductor's entry point after AOT autograd",
            "        inner = compile_fx_inner(graph, example)",
            "    return graph, lambda *args: inner(list(args))",
        ]
    return [
        "def compiled_as_torch_compile(program, inputs, patches):",
        '    """The program compiled as torch.compile compiles it, for its inputs or, where it has dynamic sizes,',
        '    their symbolic values; returns eager and the compiled graph, both called with the inputs."""',
        "    users = {s.arg.name for s in program.graph_signature.input_specs if s.kind.name == 'USER_INPUT'}",
        "    values = [n.meta['val'] for n in program.graph.nodes if n.op == 'placeholder' and n.name in users]",
        "    sizes = [v.shape if isinstance(v, torch.Tensor) else [v] for v in values]",
        "    symbolic = any(isinstance(d, torch.SymInt) for size in sizes for d in size)",
        *compiled,
        "",
        "",
    ]


def _checked(accuracy: str, eager: str, compiled: str, inputs: str) -> list[str]:
    """Lines that run the compiled graph, or compare it with eager as the minifier compares (`accuracy`)."""
    if not accuracy:
        return [f"{compiled}(*{inputs})"]
    loose = accuracy == "accuracy"
    return [
        "from torch._dynamo.debug_utils import AccuracyError, same_two_models",
        "# compared as the minifier compares: eager against the compiled graph",
        f"if not same_two_models({eager}, {compiled}, list({inputs}), only_fwd=True, "
        f"require_fp64={loose}, ignore_non_fp={loose}):",
        "    raise AccuracyError('Bad accuracy detected')",
    ]


def _run_as_torch_compile() -> list[str]:
    body = [
        "if command != 'run':",
        "    raise ValueError(f'run_repro(command={command!r}): this script only runs the graph')",
        "inputs, _ = exported_program.example_inputs",
        "eager, compiled = compiled_as_torch_compile(exported_program, inputs, config_patches)",
        "if not accuracy:",
        "    compiled(*inputs)",
        "    return",
        "from torch._dynamo.debug_utils import AccuracyError, same_two_models",
        "loose = accuracy == 'accuracy'",
        "same = same_two_models(eager, compiled, list(inputs), only_fwd=True, require_fp64=loose, ignore_non_fp=loose)",
        "if not same:",
        "    raise AccuracyError('Bad accuracy detected')",
    ]
    return [
        "def run_repro(exported_program, config_patches, accuracy, command, **minifier_options):",
        '    """Compile the graph as torch.compile compiles it, and run it on the inputs saved with',
        "    it (compared with eager where `accuracy`). `minifier_options` (save_dir, check_str) are what aoti-minify",
        '    reads back from the call below."""',
        *(f"    {line}" for line in body),
    ]


_RUN_AS_TORCH_COMPILE = _run_as_torch_compile()


_FALLBACK = "# This graph could not be rebuilt as plain PyTorch code"


def render_standalone_fallback(reason: str, header: list[str]) -> str:
    """Where the graph cannot be written as code: say so, and run repro.py beside this file."""
    return "\n".join(
        [
            *(f"# {h}" for h in header),
            "#",
            f"{_FALLBACK} ({reason}); this file runs repro.py",
            "# (with its repro.pt2) from the same folder instead.",
            "",
            "import os",
            "import runpy",
            "import sys",
            "",
            f"print({('repro_standalone.py: ' + reason + '; running repro.py instead')!r}, file=sys.stderr)",
            f"runpy.run_path(os.path.join({HERE}, {REPRO_PY!r}), run_name='__main__')",
            "",
        ]
    )


def rebuilt_standalone(layout: DumpLayout) -> str | None:
    """repro_standalone.py when it holds the graph as code (not the fallback that runs repro.py)."""
    try:
        with open(layout.repro_standalone, encoding="utf-8") as f:
            return None if _FALLBACK in f.read() else layout.repro_standalone
    except (OSError, UnicodeDecodeError):
        return None


def _settings(spec: LauncherSpec, imports: list[str]) -> list[str]:
    """The launcher's environment and config lines that hold on any machine, and the custom-op imports."""
    portable = spec.portable()
    lines = ["import os"]
    for key, value in portable.env.items():
        lines.append(f"os.environ.pop({key!r}, None)" if value is None else f"os.environ[{key!r}] = {value!r}")
    if spec.machine_settings:
        lines.append(
            f"# left out, as they name folders of the machine that wrote the launcher: "
            f"{', '.join(spec.machine_settings)}"
        )
    lines += ["", "import torch", "import torch._inductor.inductor_prims"]
    lines += [f"import {m}" for m in sorted({a.module for a in portable.config})]
    lines += [f"import {m}  # registers the custom ops the program uses" for m in imports]
    lines.append("")
    lines += [f"{a.module}.{a.attr} = {a.value!r}" for a in portable.config]
    return lines


def read_repro_graph(path: str) -> str | None:
    """The readable graph written as comments at the top of a checkpoint or repro.py (see render_repro)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    start = next((i for i, ln in enumerate(lines) if ln.startswith("# def forward")), None)
    if start is None:
        return None
    graph = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        graph.append(line[2:])
    return "\n".join(graph).rstrip()


_RESTORE_WEIGHTS_DEF = [
    f"def {RESTORE_WEIGHTS}(program, original):",
    '    """This program\'s weights are the original\'s (saved as one-element views: not copied): they are read from',
    '    `original`, or from the file the AOTI_LENS_WEIGHTS variable names."""',
    "    path = os.environ.get('AOTI_LENS_WEIGHTS', original)",
    "    if not os.path.isfile(path):",
    "        raise FileNotFoundError(f'{path}: the original program, whose weights this script reads; '",
    "                                'set AOTI_LENS_WEIGHTS to where it is')",
    "    weights = torch.export.load(path)",
    "    for table, theirs in ((program.state_dict, weights.state_dict), (program.constants, weights.constants)):",
    "        for name, value in table.items():",
    "            if isinstance(value, torch.Tensor) and value.numel() > 1 and not any(value.stride()):",
    "                table[name] = theirs[name]",
    "",
    "",
]
_WEIGHTS_LINE = re.compile(rf"^{RESTORE_WEIGHTS}\(exported_program, os\.path\.join\({re.escape(HERE)}, (.+)\)\)$", re.M)


def _weights_line(relative: str) -> str:
    return f"{RESTORE_WEIGHTS}(exported_program, os.path.join({HERE}, {relative!r}))"


def weights_of(text: str, script: str) -> str | None:
    """The original program whose weights the script reads, if it reads any."""
    found = _WEIGHTS_LINE.search(text)
    if found is None:
        return None
    return os.path.normpath(os.path.join(os.path.dirname(script), ast.literal_eval(found.group(1))))


def _with_weights_at(text: str, relative: str) -> str:
    return _WEIGHTS_LINE.sub(lambda _: _weights_line(relative), text)


def _link_or_copy(source: str, path: str) -> None:
    try:
        os.link(source, path + TMP)
        os.replace(path + TMP, path)
    except OSError:
        _remove(path + TMP)
        _copy(source, path)


def _pt2_line(pt2_name: str) -> str:
    return f"exported_program = torch.export.load(os.path.join({HERE}, {pt2_name!r}))"


def write_text(path: str, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    _atomically(path, write)


def _copy(source: str, path: str) -> None:
    with open(source, "rb") as src:  # opened first: a missing source is no fault of the output folder

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                shutil.copyfileobj(src, f)

        _atomically(path, write)


def _atomically(path: str, write) -> None:
    tmp = path + TMP
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise output_error(path, e) from e


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _remove(path: str) -> bool:
    try:
        os.remove(path)
        return True
    except OSError:
        return False
