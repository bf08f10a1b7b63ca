"""Failure signatures: what makes two failures "the same bug".

A candidate graph only counts as still failing when its signature matches the original's:
same exception type and same normalized message. Paths, hashes, addresses and numbers are masked
because they legitimately change between candidates (a new kernel file, a shorter tensor), while
the words of the error do not. That is what keeps the search from drifting to another bug.

Torch-free: the language server and the driver use it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["compile_error", "runtime_error", "accuracy", "crash", "timeout"]
# Where in a worker's query an exception was raised (worker.py marks each step).
Phase = Literal["export", "compile", "load", "run"]
_PHASE_WORDS = {"export": "exporting", "compile": "compiling", "load": "loading", "run": "running"}

_GCC_ERROR = re.compile(r"^(?P<file>/[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?:fatal )?error: (?P<msg>.+)$", re.M)
_GCC_FUNCTION = re.compile(r"In function [‘'`](?:[\w:<>,\s*&]+\s)?(?P<name>\w+)\(")
# where g++ says an error is: a kernel is a free function, AOTI's wrapper code a member function (run_impl)
_GCC_CONTEXT = re.compile(r"In (?P<member>member )?function [‘'`]")
_IMPORT_FAILURE = re.compile(r"Failed to import (?P<file>/\S+\.py)")
_PY_SYNTAX = re.compile(r"^(?P<type>\w*Error): (?P<msg>.+?) \((?P<base>[^,()]+\.py), line (?P<line>\d+)\)", re.M)
_TRITON_AT = re.compile(r"^(?P<type>\w*(?:Compilation|Compile)\w*Error): at (?P<line>\d+):(?P<col>\d+):", re.M)
_CUDA_ERROR = re.compile(r"(?P<msg>CUDA error: [^\n]+)")
_TYPE_PREFIX = re.compile(r"^(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Failed))\s*:\s*(?P<rest>.*)", re.S)
_KERNEL_NAME = re.compile(r"\b(?P<name>(?:cpp|triton_(?:poi|red|per|tem|for|spl|mm|unk))_fused_\w+?_\d+)\b")
_COMPILE_TYPES = {"CppCompileError", "SyntaxError", "CompilationError", "CompileError", "IndentationError"}
_ACCURACY_TYPES = {"AccuracyError"}
# One wild pointer is reported as either error, depending on where it lands: the same out-of-bounds load can
# give both between the eager run, the original and a smaller candidate. One bug.
_SAME_MEMORY_FAULT = {
    "CUDA error: an illegal memory access was encountered": "CUDA memory fault",
    "CUDA error: operation not supported on global/shared address space": "CUDA memory fault",
}

# Names Inductor numbers as it generates code: one bug names `buf9` in the whole graph and `buf4` in a
# smaller one (seen on a real CPU codegen KeyError), so they are masked like numbers are. Kernel names also
# list the ops fused into them, which change as the graph shrinks; s77 / u0 are export's symbol names.
_GENERATED_NAMES = [
    (re.compile(r"\b(?:cpp|triton)_(?:\w+_)?fused\w*"), "<kernel>"),
    (re.compile(r"\b(buf|tmp|in_out_ptr|in_ptr|out_ptr|arg|primals_|tangents_|[su])\d+(?:_\d+)?\b"), r"\1<n>"),
]
_MASKS = [
    (re.compile(r"[‘’`´]"), "'"),
    (re.compile(r"[“”]"), '"'),
    (re.compile(r"(?<![\w<>])(?:/[\w.@+~-]+){2,}/?|(?<![\w<>/])/[\w@+~-]+\.\w+"), "<path>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),
    (re.compile(r"\b(?=[a-z0-9]*\d)[a-z0-9]{20,}\b"), "<hash>"),
    *_GENERATED_NAMES,
    (re.compile(r"(?<![\w<])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w>])"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def normalize(message: str) -> str:
    for pattern, replacement in _MASKS:
        message = pattern.sub(replacement, message)
    return message.strip()[:300]


@dataclass(frozen=True)
class KernelRef:
    """Where in generated code the failure points; every field is optional because errors vary."""

    name: str | None = None
    file: str | None = None
    line: int | None = None
    column: int | None = None
    source_nodes: list[str] = field(default_factory=list)
    aten_ops: list[str] = field(default_factory=list)
    exact: bool = False  # source_nodes named by Inductor (provenance, wrapper comments), not guessed from ops
    fused: bool = False  # it failed while Inductor generated one kernel of all its source nodes: no one node alone


@dataclass(frozen=True)
class Signature:
    exc_type: str
    message: str
    kind: Kind = "runtime_error"

    def matches(self, other: Signature | None) -> bool:
        return other is not None and self._bug() == other._bug()

    def _bug(self) -> tuple[str, str]:
        return self.exc_type, _SAME_MEMORY_FAULT.get(self.message, self.message)

    def describe(self) -> str:
        return f"{self.exc_type}: {self.message}" if self.message else self.exc_type


@dataclass(frozen=True)
class ErrorAnalysis:
    signature: Signature
    headline: str
    kernel: KernelRef | None


def analyze_error(exc_type: str, text: str, phase: Phase | None = None, frame: str | None = None) -> ErrorAnalysis:
    """Reduce an exception (its type name and full text, traceback or message) to a signature.

    `phase` is the step of the query that raised it and `frame` the raising function (`module.function`),
    where known: an exception without a message is told apart by them (a bare `assert` in one Inductor
    pass is not the same bug as one in another), and an error raised while compiling is a compile error
    whatever its type."""
    for parse in (_cpp_compile_error, _python_kernel_error, _triton_compile_error, _cuda_error):
        found = parse(text)
        if found is not None:
            return found
    inner_type, rest = _peel_type(exc_type, text)
    headline = first_line(rest)
    if headline in ("", f"{inner_type}()"):
        return _messageless(inner_type, phase, frame)
    return _analysis(inner_type, headline, _kernel_named_in(text), phase)


def script_signature(stderr: str) -> Signature | None:
    """The signature of what a Python script raised, from its stderr: the last exception line of its traceback. An
    exception without a message is told by where and when it was raised, as a worker tells it: the innermost frame
    of the first traceback (the original cause), and compiling where Inductor wrapped it."""
    found = list(_RAISED.finditer(stderr)) or list(_RAISED_BARE.finditer(stderr))  # a bare `raise X` last
    if not found:
        return None
    exc_type = found[-1].group("type")
    phase: Phase | None = "compile" if exc_type.endswith("InductorError") else None
    return analyze_error(
        exc_type.rsplit(".", 1)[-1], stderr[found[-1].start() :], phase, _first_raising(stderr)
    ).signature


def _first_raising(stderr: str) -> str | None:
    """`module.function` of the innermost frame of the first traceback in `stderr`, its module read from the path
    (an installed package's, or torch's in a source tree)."""
    first = re.split(r"\n(?:The above exception|During handling of the above exception)", stderr, maxsplit=1)[0]
    frames = _TRACEBACK_FRAME.findall(first)
    if not frames:
        return None
    path, function = frames[-1]
    parts = path.replace("\\", "/").removesuffix(".py").split("/")
    for top in ("site-packages", "dist-packages"):
        if top in parts:
            parts = parts[len(parts) - parts[::-1].index(top) :]
            break
    else:
        if "torch" not in parts:
            return None
        parts = parts[len(parts) - 1 - parts[::-1].index("torch") :]
    return ".".join(parts + [function])


def crash_signature(signal_name: str) -> Signature:
    return Signature(exc_type="WorkerCrash", message=signal_name, kind="crash")


_RAISED = re.compile(r"^(?P<type>[\w.]+(?:Error|Exception)): ", re.M)
_RAISED_BARE = re.compile(r"^(?P<type>[\w.]+(?:Error|Exception))$", re.M)
_TRACEBACK_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)$', re.M)


def _kind(exc_type: str, phase: Phase | None) -> Kind:
    if exc_type in _COMPILE_TYPES or phase in ("export", "compile"):
        return "compile_error"
    return "accuracy" if exc_type in _ACCURACY_TYPES else "runtime_error"


def _analysis(exc_type: str, headline: str, kernel: KernelRef | None, phase: Phase | None = None) -> ErrorAnalysis:
    sig = Signature(exc_type=exc_type, message=normalize(headline), kind=_kind(exc_type, phase))
    return ErrorAnalysis(signature=sig, headline=headline.strip(), kernel=kernel)


def _messageless(exc_type: str, phase: Phase | None, frame: str | None) -> ErrorAnalysis:
    where = f" in {frame}" if frame else ""
    when = f" while {_PHASE_WORDS[phase]}" if phase else ""
    message = f"(no message) raised{where}{when}"
    sig = Signature(exc_type=exc_type, message=message, kind=_kind(exc_type, phase))
    return ErrorAnalysis(signature=sig, headline=f"{exc_type} {message}", kernel=None)


def _cpp_compile_error(text: str) -> ErrorAnalysis | None:
    error = _GCC_ERROR.search(text)
    if error is None:
        return None
    contexts = list(_GCC_CONTEXT.finditer(text, 0, error.start()))
    context = contexts[-1] if contexts else None
    function = _GCC_FUNCTION.match(text, context.start()) if context and not context.group("member") else None
    name = function.group("name") if function else None
    kernel = KernelRef(
        name=name,
        file=error.group("file"),
        line=int(error.group("line")),
        column=int(error.group("col")),
        aten_ops=kernel_ops(name) if name else [],
    )
    return _analysis("CppCompileError", error.group("msg"), kernel)


def _python_kernel_error(text: str) -> ErrorAnalysis | None:
    imported = _IMPORT_FAILURE.search(text)
    syntax = _PY_SYNTAX.search(text)
    if syntax is None or imported is None:
        return None
    kernel = KernelRef(file=imported.group("file"), line=int(syntax.group("line")))
    headline = f"{syntax.group('msg')} ({syntax.group('base')}, line {syntax.group('line')})"
    return _analysis(syntax.group("type"), headline, kernel)


def _triton_compile_error(text: str) -> ErrorAnalysis | None:
    found = _TRITON_AT.search(text)
    if found is None:
        return None
    following = text[found.end() :].splitlines()
    detail = next((ln.strip() for ln in reversed(following[:12]) if ln.strip() and not ln.strip().startswith("^")), "")
    kernel = _kernel_named_in(text) or KernelRef()
    kernel = KernelRef(
        kernel.name,
        kernel.file,
        int(found.group("line")),
        int(found.group("col")),
        kernel.source_nodes,
        kernel.aten_ops,
    )
    return _analysis(found.group("type"), detail or found.group(0), kernel)


def _cuda_error(text: str) -> ErrorAnalysis | None:
    found = _CUDA_ERROR.search(text)
    if found is None:
        return None
    return _analysis("CUDAError", found.group("msg"), _kernel_named_in(text))


def _peel_type(exc_type: str, text: str) -> tuple[str, str]:
    """Wrappers such as InductorError print the inner exception as 'Inner: message'."""
    rest = text.strip()
    inner = exc_type.rsplit(".", 1)[-1]
    for _ in range(4):
        found = _TYPE_PREFIX.match(rest)
        if found is None:
            break
        inner, rest = found.group("type"), found.group("rest")
    return inner, rest


def first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _kernel_named_in(text: str) -> KernelRef | None:
    found = _KERNEL_NAME.search(text)
    if found is None:
        return None
    return KernelRef(name=found.group("name"), aten_ops=kernel_ops(found.group("name")))


def kernel_ops(kernel_name: str, known_ops: set[str] | None = None) -> list[str]:
    """The ATen op names Inductor folded into a descriptive kernel name.

    `cpp_fused_add_native_layer_norm_relu_3` -> [add, native_layer_norm, relu] when the op names are
    known (they contain underscores, so splitting needs the vocabulary); words that belong to no known
    op are dropped. Without a vocabulary each underscore-separated word is returned.
    """
    body = re.sub(r"^(?:cpp|triton_[a-z]+)_fused_", "", kernel_name)
    body = re.sub(r"_\d+$", "", body)
    words = body.split("_")  # empty words keep the underscore of ops like `_softmax`
    if not known_ops:
        return [w for w in words if w]
    return _segment(words, known_ops)


def _segment(words: list[str], vocab: set[str]) -> list[str]:
    """Split words into vocabulary entries, skipping as few unknown words as possible."""
    best: list[tuple[int, int, list[str]]] = [(0, 0, [])] * (len(words) + 1)
    for start in range(len(words) - 1, -1, -1):
        skip_unknown, skip_parts, skip_ops = best[start + 1]
        options = [(skip_unknown + bool(words[start]), skip_parts, skip_ops)]
        for end in range(start + 1, len(words) + 1):
            word = "_".join(words[start:end])
            if word in vocab:
                unknown, parts, ops = best[end]
                options.append((unknown, parts + 1, [word, *ops]))
        best[start] = min(options, key=lambda o: (o[0], o[1]))
    return best[0][2]
