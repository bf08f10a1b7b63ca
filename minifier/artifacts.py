"""Where the minifier writes, and the files it writes there.

Everything goes inside the failure's own `minifier/` folder (or `--output-dir`): failure.json,
`checkpoints/<N>.py` each beside its own `<N>.pt2` (PyTorch's overwrite one shared file, so its old
checkpoints silently load the newest graph), the final repro.py + repro.pt2, and a scratch folder.
Checkpoints and repro.py use PyTorch's own `run_repro` format: they run with plain torch, and
`python repro.py minify` hands them to PyTorch's minifier if anyone wants to compare.
Torch-free.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from . import wire
from .events import Failure
from .launcher import LauncherSpec

SCRATCH = "aoti-lens-work"


class OutputError(OSError):
    """The output folder cannot be written."""


@dataclass(frozen=True)
class Layout:
    root: str
    checkpoints: str

    @property
    def failure_json(self) -> str:
        return os.path.join(self.root, "failure.json")

    @property
    def repro_py(self) -> str:
        return os.path.join(self.root, "repro.py")

    @property
    def work(self) -> str:
        return os.path.join(self.root, SCRATCH)

    @property
    def values(self) -> str:
        return os.path.join(self.work, "values.pt")

    @property
    def candidates(self) -> str:
        return os.path.join(self.work, "candidates")

    def checkpoint_py(self, nodes: int) -> str:
        return os.path.join(self.checkpoints, f"{nodes}.py")


def layout_for(spec: LauncherSpec, output_dir: str | None = None, save_dir: str | None = None) -> Layout:
    root = os.path.abspath(output_dir or spec.minifier_dir)
    checkpoints = save_dir or (os.path.join(root, "checkpoints") if output_dir else None)
    checkpoints = checkpoints or spec.save_dir or os.path.join(root, "checkpoints")
    return Layout(root=root, checkpoints=os.path.abspath(checkpoints))


def prepare(layout: Layout) -> None:
    for folder in (layout.root, layout.checkpoints, layout.work, layout.candidates):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create {folder}: {e.strerror}") from e
        if not os.access(folder, os.W_OK):
            raise OutputError(f"{folder} is not writable (read-only debug folder?); "
                              "pass --output-dir DIR to write the minifier's outputs elsewhere")


def clean_scratch(layout: Layout) -> None:
    shutil.rmtree(layout.candidates, ignore_errors=True)
    try:
        os.remove(layout.values)
    except OSError:
        pass


def relocate_dump(launcher: str, dest: str, name: str | None = None) -> str:
    """Copy a dump's whole run folder to `dest/torch_compile_debug/<name>`; PyTorch's launcher names
    its .pt2 and save_dir by absolute path, so the copy's launcher is rewritten to use its own."""
    run_dir = os.path.dirname(os.path.dirname(launcher))
    target = os.path.join(dest, "torch_compile_debug", name or os.path.basename(run_dir))
    shutil.copytree(run_dir, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(SCRATCH))
    copied = os.path.join(target, "minifier", "minifier_launcher.py")
    with open(copied, encoding="utf-8") as f:
        text = f.read()
    _write_text(copied, text.replace(run_dir, target))
    return copied


def write_failure(layout: Layout, failure: Failure) -> str:
    _write_text(layout.failure_json, wire.dumps(failure) + "\n")
    return layout.failure_json


def write_checkpoint(layout: Layout, spec: LauncherSpec, accuracy: str, nodes: int, pt2: str,
                     graph_code: str, header: list[str], imports: list[str]) -> str:
    path = layout.checkpoint_py(nodes)
    shutil.copyfile(pt2, os.path.splitext(path)[0] + ".pt2")
    pt2_name = os.path.basename(path)[:-3] + ".pt2"
    _write_text(path, render_repro(spec, pt2_name, accuracy, graph_code, header, imports))
    return path


def write_repro(layout: Layout, checkpoint_py: str) -> str:
    """repro.py is the last checkpoint, renamed so that it finds its own repro.pt2."""
    shutil.copyfile(os.path.splitext(checkpoint_py)[0] + ".pt2", os.path.join(layout.root, "repro.pt2"))
    with open(checkpoint_py, encoding="utf-8") as f:
        text = f.read()
    text = text.replace(_pt2_line(os.path.basename(checkpoint_py)[:-3] + ".pt2"), _pt2_line("repro.pt2"))
    _write_text(layout.repro_py, text)
    return layout.repro_py


def copy_repro(layout: Layout, destination: str) -> str:
    os.makedirs(destination, exist_ok=True)
    for name in ("repro.py", "repro.pt2"):
        shutil.copyfile(os.path.join(layout.root, name), os.path.join(destination, name))
    return os.path.join(destination, "repro.py")


def render_repro(spec: LauncherSpec, pt2_name: str, accuracy: str, graph_code: str, header: list[str],
                 imports: list[str]) -> str:
    lines = [f"# {h}" for h in header]
    lines += ["#", "# Run: python <this file>        (add `minify` to hand it to PyTorch's own minifier)", ""]
    lines += [f"# {ln}" if ln else "#" for ln in graph_code.splitlines()]
    lines += ["", "import os"]
    for key, value in spec.env.items():
        lines.append(f"os.environ.pop({key!r}, None)" if value is None else f"os.environ[{key!r}] = {value!r}")
    lines += ["", "import torch", "import torch._inductor.inductor_prims"]
    lines += [f"import {m}" for m in sorted({a.module for a in spec.config})]
    lines += [f"import {m}  # registers the custom ops the program uses" for m in imports]
    lines.append("")
    lines += [f"{a.module}.{a.attr} = {a.value!r}" for a in spec.config]
    lines += [
        "",
        _pt2_line(pt2_name),
        f"config_patches = {spec.config_patches!r}",
        "if __name__ == '__main__':",
        "    from torch._dynamo.repro.aoti import run_repro",
        "    with torch.no_grad():",
        f"        run_repro(exported_program, config_patches=config_patches, accuracy={accuracy!r}, "
        f"command='run', save_dir=None, check_str={spec.check_str!r})",
        "",
    ]
    return "\n".join(lines)


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


def _pt2_line(pt2_name: str) -> str:
    return f"exported_program = torch.export.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), {pt2_name!r}))"


def _write_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
