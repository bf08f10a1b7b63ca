"""Reading PyTorch's `minifier_launcher.py` (and level-1 `repro.py`) without executing it.

The launcher is code from the workspace. We never run it here: we parse it with `ast` and accept only the
shape PyTorch writes (literal config assignments, environment lines, `torch.export.load(<path>)` and
a `run_repro(...)` call with literal keywords). Anything else is reported, not executed.

Two kinds: AOTInductor's (`torch._dynamo.repro.aoti`, the program in a .pt2) and torch.compile's
(`torch._dynamo.repro.after_aot`, the post-AOT graph as a `Repro` module and its `load_args`; or
`torch._dynamo.repro.after_dynamo`, Dynamo's graph before AOT autograd, with the backend it was given). The
latter's graph exists only as code: a worker runs the launcher's definitions once and saves the graph as an
exported program in the scratch folder (`pt2` names where; minifier.program.after_aot), the same program every
other step reads.

Torch-free: the language server reads launchers with this module too.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .layout import CHECKPOINTS, LAUNCHER, MINIFIER, DumpLayout, launcher_in

CONFIG_MODULES = (
    "torch._dynamo.config",
    "torch._inductor.config",
    "torch._functorch.config",
    "torch.fx.experimental._config",
)
AOTI_RUN_REPRO = "torch._dynamo.repro.aoti"
AFTER_AOT_RUN_REPRO = "torch._dynamo.repro.after_aot"
AFTER_DYNAMO_RUN_REPRO = "torch._dynamo.repro.after_dynamo"
LauncherKind = Literal["aoti", "after_aot"]
# Our own repro.py of a torch.compile failure compiles as after_aot does, with Inductor's entry point
COMPILE_FX = "torch._inductor.compile_fx"
HERE = "os.path.dirname(os.path.abspath(__file__))"  # how our own repro files name their folder
# Our scripts' call that gives a program the original's weights it refers to (minifier.contract.artifacts)
RESTORE_WEIGHTS = "restore_weights"
_TORCH_VERSION = re.compile(r"^# torch version: (\S+)", re.M)
_CUDA_VERSION = re.compile(r"^# torch cuda version: (\S+)", re.M)


# Environment variables that only steer PyTorch's dumping: a repro (or a worker) must not dump again when
# it fails, so they are always removed (PyTorch's launcher pops the first two itself).
DUMP_ENV = ("TORCHDYNAMO_REPRO_AFTER", "TORCHDYNAMO_REPRO_LEVEL", "AOTINDUCTOR_REPRO_LEVEL", "DUMP_AOTI_MINIFIER")
_DRIVE_PATH = re.compile(r"^[A-Za-z]:[\\/]")
STORAGES = "storages"  # where torch.compile's launcher saves its input values, inside its save_dir


def machine_path(value: Any) -> bool:
    """A value that names a place on the machine that wrote the launcher: an absolute path, or a
    tuple holding one."""
    if isinstance(value, (tuple, list)):
        return any(machine_path(v) for v in value)
    return isinstance(value, str) and (value.startswith(("/", "~")) or bool(_DRIVE_PATH.match(value)))


class BadLauncher(ValueError):
    """The file is not a usable AOTI minifier launcher; the message says why."""


@dataclass(frozen=True)
class ConfigAssignment:
    module: str
    attr: str
    value: Any


@dataclass(frozen=True)
class LauncherSpec:
    path: str
    pt2: str
    run_repro_line: int
    command: Literal["minify", "run"] = "minify"
    accuracy: str = ""
    check_str: str | None = None
    save_dir: str | None = None
    config: list[ConfigAssignment] = field(default_factory=list)
    config_patches: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    torch_version: str | None = None
    cuda_version: str | None = None
    skipped: list[str] = field(default_factory=list)
    weights: str | None = None  # the original program whose weights `pt2` refers to (one of our checkpoints)
    kind: LauncherKind = "aoti"  # who compiles: aoti_compile_and_package, or torch.compile's Inductor
    traced: bool = False  # the graph is code in the launcher (torch.compile's), `pt2` where a worker saves it
    dynamo_graph: bool = False  # that code is Dynamo's graph (repro_after="dynamo"), before AOT autograd

    def layout(self, output_dir: str | None = None, save_dir: str | None = None) -> DumpLayout:
        """Where this dump's files are and its outputs go (the command line's --output-dir, --save-dir).
        The launcher's own save_dir is not followed: it names the folder the dump was written in, on
        the machine that wrote it."""
        return DumpLayout.of(self.path, output_dir, save_dir)

    def portable(self) -> LauncherSpec:
        """This launcher without what holds only on the machine that wrote it (environment lines and
        settings whose value is one of its paths: PyTorch writes TORCHINDUCTOR_CACHE_DIR as that
        machine's folder) and with PyTorch's dump switches removed: what a repro.py sets, and a worker."""
        env = {k: v for k, v in self.env.items() if k not in DUMP_ENV and (v is None or not machine_path(v))}
        return replace(
            self,
            env={**env, **dict.fromkeys(DUMP_ENV)},
            config=[a for a in self.config if not machine_path(a.value)],
            config_patches={k: v for k, v in self.config_patches.items() if not machine_path(v)},
        )

    @property
    def machine_settings(self) -> list[str]:
        """What portable() leaves out, by name only."""
        return [
            *(k for k, v in self.env.items() if v is not None and machine_path(v)),
            *(f"{a.module}.{a.attr}" for a in self.config if machine_path(a.value)),
            *(f"config_patches[{k!r}]" for k, v in self.config_patches.items() if machine_path(v)),
        ]

    @property
    def run_dir(self) -> str | None:
        """`torch_compile_debug/run_*` when the launcher sits in its usual `minifier/` folder."""
        layout = self.layout()
        return layout.run_dir if layout.in_run_folder else None


def find_launcher(path: str) -> str:
    """Accept a launcher, a level-1 repro.py, a `minifier/` folder or a `run_*` folder."""
    if os.path.isdir(path):
        found = launcher_in(path)
        if found is not None:
            return os.path.abspath(found)
        raise BadLauncher(f"{path}: no {MINIFIER}/{LAUNCHER} in this folder")
    if not os.path.isfile(path):
        try:
            os.stat(path)
        except OSError as e:  # say why: a loop of symbolic links, a folder that may not be entered
            raise BadLauncher(f"{path}: no such file" if e.errno == errno.ENOENT else f"{path}: {e.strerror}") from e
        raise BadLauncher(f"{path}: not a file")
    return os.path.abspath(path)


def read_launcher(path: str, *, require_pt2: bool = True) -> LauncherSpec:
    path = find_launcher(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BadLauncher(f"{path}: cannot read: {e}") from e
    return parse_launcher(text, path, require_pt2=require_pt2)


def parse_launcher(text: str, path: str, *, require_pt2: bool = True) -> LauncherSpec:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        raise BadLauncher(f"{path}: not valid Python (line {e.lineno}: {e.msg})") from e
    kind, dynamo_graph = _launcher_kind(tree, text, path)
    call = _find_run_repro(tree, path)
    kwargs = _literal_keywords(call, path)
    config, env, skipped, pt2_literal, patches, weights = _read_preamble(tree)
    if kind == "after_aot" and pt2_literal is None:
        _require_after_aot_graph(tree, kwargs, path)
        if dynamo_graph:
            _require_inductor_backend(kwargs, path)
        pt2 = after_aot_program(path, text)
    elif pt2_literal is None:
        raise BadLauncher(
            f"{path}: no `exported_program = torch.export.load(...)` line; "
            "only launchers written by PyTorch's AOTI and torch.compile minifiers are supported"
        )
    else:
        pt2 = _resolve_pt2(pt2_literal, path, require_pt2)
    accuracy = kwargs.get("accuracy", "")
    accuracy = (
        {True: "accuracy", False: "", None: ""}.get(accuracy, accuracy) if not isinstance(accuracy, str) else accuracy
    )
    command = kwargs.get("command", "minify")
    if command not in ("minify", "run"):
        raise BadLauncher(f"{path}: run_repro(command={command!r}) is neither 'minify' nor 'run'")
    if "config_patches" in kwargs and isinstance(kwargs["config_patches"], dict):
        patches = kwargs["config_patches"]
    torch_version = _TORCH_VERSION.search(text)
    cuda_version = _CUDA_VERSION.search(text)
    return LauncherSpec(
        path=path,
        pt2=pt2,
        run_repro_line=call.lineno - 1,
        command=command,
        accuracy=accuracy,
        check_str=kwargs.get("check_str"),
        save_dir=kwargs.get("save_dir"),
        config=config,
        config_patches=patches or {},
        env=env,
        torch_version=torch_version.group(1) if torch_version else None,
        cuda_version=cuda_version.group(1) if cuda_version and cuda_version.group(1) != "None" else None,
        skipped=skipped,
        weights=os.path.normpath(os.path.join(os.path.dirname(path), weights)) if weights else None,
        kind=kind,
        traced=pt2_literal is None,
        dynamo_graph=dynamo_graph,
    )


def saved_inputs(spec: LauncherSpec) -> str | None:
    """The folder holding a torch.compile launcher's saved input values: its dump's own checkpoints folder, else the
    save_dir it names (the machine that wrote it); None where neither has them (after_aot then makes random values)."""
    beside = os.path.join(DumpLayout.of(spec.path).minifier_dir, CHECKPOINTS)
    for folder in (beside, spec.save_dir):
        if folder and os.path.isdir(os.path.join(folder, STORAGES)):
            return folder
    return None


def symbolic_inputs(path: str, count: int) -> list[tuple[int, ...] | bool]:
    """Per input a torch.compile launcher's `load_args` reads (`count` of them), what was dynamic where torch.compile
    compiled it: a tensor's dims written as symbols (`(s77, 8)`: (0,)), whether an int is a symbol (`reader.symint(4,
    expr='s77')`); a constant or an unsupported value is never dynamic."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    load_args = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_args")
    found: list[tuple[int, ...] | bool] = []
    for statement in load_args.body:  # PyTorch writes one reader call a line: `buf = reader.storage(...)`, ...
        call = getattr(statement, "value", None)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)) or call.func.attr == "storage":
            continue
        if call.func.attr == "tensor" and len(call.args) > 1 and isinstance(call.args[1], ast.Tuple):
            found.append(tuple(i for i, e in enumerate(call.args[1].elts) if not isinstance(e, ast.Constant)))
        else:  # symint, const, unsupported, generator, ...: one input each
            found.append(call.func.attr == "symint" and any(k.arg == "expr" for k in call.keywords))
    if len(found) != count:
        raise ValueError(f"{path}: load_args reads {count} inputs in a shape aoti-lens does not follow")
    return found


def runnable_original(spec: LauncherSpec) -> str:
    """The launcher's text as a script that runs the original program once, from any folder, with the torch it runs
    under (another release's): its `run_repro` told `command='run'`, its program and saved inputs named where they
    are now."""
    with open(spec.path, encoding="utf-8") as f:
        text = f.read()
    tree = ast.parse(text, filename=spec.path)
    lines = text.splitlines()
    call = _find_run_repro(tree, spec.path)
    keywords = {"command": "run", **({"save_dir": saved_inputs(spec)} if spec.traced else {})}
    call.keywords = [k for k in call.keywords if k.arg not in keywords]
    call.keywords += [ast.keyword(arg=name, value=ast.Constant(value)) for name, value in keywords.items()]
    edits: list[tuple[ast.stmt | ast.expr, str]] = [(call, ast.unparse(call))]
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and _dotted(stmt.targets[0]) == "exported_program":
            edits.append((stmt, f"exported_program = torch.export.load({spec.pt2!r})"))
    for node, code in sorted(edits, key=lambda edit: -edit[0].lineno):  # from the end: line numbers stay true
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        lines[first : last + 1] = [lines[first][: node.col_offset] + code + lines[last][node.end_col_offset :]]
    return "\n".join(lines) + "\n"


def after_aot_program(launcher: str, text: str) -> str:
    """Where a torch.compile launcher's graph is saved as an exported program: the dump's scratch folder, named
    by the launcher's content (an edited launcher is another graph)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return os.path.join(DumpLayout.of(launcher).work, f"after_aot-{digest}.pt2")


def _launcher_kind(tree: ast.Module, text: str, path: str) -> tuple[LauncherKind, bool]:
    """Who compiles the launcher's graph, and whether that graph is Dynamo's (compiled after AOT autograd too)."""
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    if AOTI_RUN_REPRO in modules:
        return "aoti", False
    if AFTER_AOT_RUN_REPRO in modules or COMPILE_FX in modules:
        return "after_aot", False
    if AFTER_DYNAMO_RUN_REPRO in modules:
        return "after_aot", True
    others = sorted(m for m in modules if m.startswith("torch._dynamo.repro."))
    if others:
        raise BadLauncher(f"{path}: a launcher for {others[0]}, which aoti-lens does not read")
    if "run_repro" in text:
        raise BadLauncher(f"{path}: calls run_repro but does not import it from {AOTI_RUN_REPRO}")
    raise BadLauncher(f"{path}: not a PyTorch minifier launcher (no run_repro call)")


def _require_after_aot_graph(tree: ast.Module, kwargs: dict[str, Any], path: str) -> None:
    """torch.compile's launcher: a `Repro` module and `load_args`, traced with real or symbolic sizes."""
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in ("Repro", "load_args") if name not in defined]
    if missing:
        raise BadLauncher(f"{path}: a torch.compile launcher without {' or '.join(missing)}")
    mode = kwargs.get("tracing_mode", "real")
    if mode not in ("real", "symbolic"):
        raise BadLauncher(f"{path}: traced with tracing_mode={mode!r}, which aoti-lens does not read")


def _require_inductor_backend(kwargs: dict[str, Any], path: str) -> None:
    """A Dynamo-level launcher is minified as Inductor compiles it, so its backend must be Inductor."""
    backend = kwargs.get("backend", "inductor")
    if backend != "inductor":
        raise BadLauncher(
            f"{path}: torch.compile's launcher for backend={backend!r}; aoti-lens minifies Inductor's failures "
            "(backend='inductor')"
        )
    if kwargs.get("autocast"):
        raise BadLauncher(f"{path}: a launcher that runs its graph under autocast, which aoti-lens does not read yet")


def _find_run_repro(tree: ast.Module, path: str) -> ast.Call:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("run_repro"):
            return node
    raise BadLauncher(f"{path}: no run_repro(...) call")


def _literal_keywords(call: ast.Call, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        if isinstance(kw.value, ast.Name):
            continue  # e.g. config_patches=config_patches, resolved from the preamble
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except ValueError as e:
            raise BadLauncher(f"{path}:{kw.value.lineno}: run_repro({kw.arg}=...) is not a literal") from e
    return out


def _read_preamble(tree: ast.Module):
    config: list[ConfigAssignment] = []
    env: dict[str, str | None] = {}
    skipped: list[str] = []
    pt2: str | None = None
    patches: dict[str, Any] | None = None
    weights: str | None = None
    for stmt in tree.body:
        if isinstance(stmt, ast.If):
            break  # `if __name__ == '__main__':` ends the preamble
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = _dotted(stmt.targets[0])
            if target == "exported_program":
                pt2 = _export_load_path(stmt.value)
            elif target == "config_patches":
                patches = _literal_or_none(stmt.value)
            elif target.startswith("os.environ["):
                _read_env_assign(stmt, env)
            else:
                module = next((m for m in CONFIG_MODULES if target.startswith(m + ".")), None)
                if module is not None:
                    value_ok, value = _try_literal(stmt.value)
                    if value_ok:
                        config.append(ConfigAssignment(module, target[len(module) + 1 :], value))
                    else:
                        skipped.append(f"{target} (value is not a literal: {ast.unparse(stmt.value)[:80]})")
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            _read_env_pop(stmt.value, env)
            weights = _restored_from(stmt.value) or weights
    return config, env, skipped, pt2, patches, weights


def _restored_from(call: ast.Call) -> str | None:
    """The path, relative to the script, in `restore_weights(exported_program, os.path.join(<HERE>, '<path>'))`."""
    if not (isinstance(call.func, ast.Name) and call.func.id == RESTORE_WEIGHTS and len(call.args) == 2):
        return None
    arg = call.args[1]
    if isinstance(arg, ast.Call) and _dotted(arg.func) == "os.path.join" and len(arg.args) == 2:
        ok, relative = _try_literal(arg.args[1])
        if ast.unparse(arg.args[0]) == HERE and ok and isinstance(relative, str):
            return relative
    return None


def _export_load_path(value: ast.expr) -> str | None:
    """The path in `torch.export.load('<path>')`, or the name in the form our own checkpoints and
    repro.py use, `torch.export.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), '<name>'))`."""
    if not (isinstance(value, ast.Call) and _dotted(value.func) == "torch.export.load" and value.args):
        return None
    arg = value.args[0]
    ok, literal = _try_literal(arg)
    if ok and isinstance(literal, str):
        return literal
    if (
        isinstance(arg, ast.Call)
        and _dotted(arg.func) == "os.path.join"
        and len(arg.args) == 2
        and ast.unparse(arg.args[0]) == HERE
    ):
        ok, name = _try_literal(arg.args[1])
        if ok and isinstance(name, str) and os.path.basename(name) == name:
            return name
    return None


def _read_env_assign(stmt: ast.Assign, env: dict[str, str | None]) -> None:
    target = stmt.targets[0]
    if isinstance(target, ast.Subscript):
        ok_key, key = _try_literal(target.slice)
        ok_value, value = _try_literal(stmt.value)
        if ok_key and ok_value and isinstance(key, str) and isinstance(value, str):
            env[key] = value


def _read_env_pop(call: ast.Call, env: dict[str, str | None]) -> None:
    if _dotted(call.func) == "os.environ.pop" and call.args:
        ok, key = _try_literal(call.args[0])
        if ok and isinstance(key, str):
            env[key] = None


def _resolve_pt2(literal: str, launcher: str, require: bool) -> str:
    """The dump's own program first: where PyTorch puts it beside the launcher, or the launcher's path
    to it taken relative to the launcher (ours are), then the absolute path the launcher names."""
    beside = DumpLayout.of(launcher).exported_program
    if os.path.isabs(literal):
        candidates = (beside, literal)
    else:
        candidates = (os.path.join(os.path.dirname(launcher), literal), beside)
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    if require:
        raise BadLauncher(
            f"{launcher}: the exported program is missing: neither {literal} nor {beside} exists "
            "(was the debug folder moved or partly deleted?)"
        )
    return literal


def _try_literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _literal_or_none(node: ast.expr) -> Any:
    return _try_literal(node)[1]


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return f"{_dotted(node.value)}[...]"
    return ""
