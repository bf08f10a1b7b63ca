"""What `run` and `minify` share: options, the output layout, the worker pool, verdicts.

Torch-free: the driver process only parses, schedules and writes; workers do all torch work.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from . import protocol as p
from .artifacts import Layout, layout_for, prepare
from .events import Event, Failure, LogEvent, Verdict, encode_event, load_failure
from .launcher import LauncherSpec, read_launcher
from .signature import ErrorAnalysis, Signature, crash_signature
from .workers import Pool, PoolConfig, Result, fork_server


@dataclass
class Options:
    launcher: str
    events: bool = False
    workers: int = 1
    devices: list[str] = field(default_factory=list)
    timeout: float = 600.0
    accuracy: str | None = None
    check_str: str | None = None
    output_dir: str | None = None
    save_dir: str | None = None
    export_mode: str = "python"
    max_granularity: int | None = None
    skip_sanity: bool = False
    skip_export_error: bool = True
    offload_to_disk: bool = False
    copy_to: str | None = None
    slicing: bool = True
    imports: list[str] = field(default_factory=list)
    keep_warm: float = 0.0


class Reporter:
    """Human progress on stderr; with --events, the JSON-lines events on stdout."""

    def __init__(self, events: bool) -> None:
        self.events = events

    def emit(self, event: Event) -> None:
        if self.events:
            sys.stdout.write(encode_event(event) + "\n")
            sys.stdout.flush()

    def say(self, text: str) -> None:
        sys.stderr.write(f"[aoti-minify] {text}\n")
        sys.stderr.flush()

    def log(self, text: str, level: str = "info") -> None:
        self.say(text if level == "info" else f"warning: {text}")
        self.emit(LogEvent(message=text, level=level))

    def result(self, text: str) -> None:
        """The command's answer: on stdout for people, on stderr when stdout carries events."""
        stream = sys.stderr if self.events else sys.stdout
        stream.write(text + "\n")
        stream.flush()


@dataclass
class Session:
    options: Options
    spec: LauncherSpec
    layout: Layout
    accuracy: str

    @classmethod
    def open(cls, options: Options) -> Session:
        spec = read_launcher(options.launcher)
        layout = layout_for(spec, options.output_dir, options.save_dir)
        prepare(layout)
        accuracy = spec.accuracy if options.accuracy is None else options.accuracy
        return cls(options=options, spec=spec, layout=layout, accuracy=accuracy)

    @property
    def check_str(self) -> str | None:
        return self.options.check_str if self.options.check_str is not None else self.spec.check_str

    def pool(self, size: int) -> Pool:
        return Pool(self._pool_config(size))

    def warm_up(self) -> None:
        """Start (or find) the fork server that the next run with --keep-warm will use, and leave it."""
        fork_server(self._pool_config(0)).close()

    def _pool_config(self, size: int) -> PoolConfig:
        init = p.InitRequest(launcher=self.spec, work_dir=self.layout.work,
                             export_mode=self.options.export_mode, accuracy=self.accuracy,
                             imports=self.options.imports)
        return PoolConfig(init=init, log_dir=self.layout.work, size=size, devices=self.options.devices,
                          timeout=self.options.timeout, keep_warm=self.options.keep_warm)

    def saved_failure(self) -> Failure | None:
        """What an earlier `aoti-minify run` wrote, if anything readable."""
        try:
            return load_failure(self.layout.failure_json)
        except (OSError, ValueError):
            return None


def result_signature(result: Result) -> tuple[Signature | None, ErrorAnalysis | None]:
    """The signature of a failing result (None when it passed or was not exportable)."""
    if result.kind == "crash":
        return crash_signature(result.signal), None
    if result.kind == "timeout":
        return Signature(exc_type="Timeout", message="no verdict in time", kind="timeout"), None
    outcome = result.outcome
    if outcome is None or outcome.status != "raised" or outcome.error is None:
        return None, None
    return outcome.error.signature, outcome.error


def classify(result: Result, target: Signature | None, check_str: str | None) -> Verdict:
    """`fails` only for the same failure: the target signature, or the --check-str regex."""
    signature, _ = result_signature(result)
    if signature is None:
        return "export_error" if result.outcome and result.outcome.status == "export_error" else "passes"
    if check_str is not None:
        text = (result.outcome.text if result.outcome else result.detail) or ""
        return "fails" if check_str_matches(check_str, text) else _other(result)
    if target is None or target.matches(signature):
        return "fails"
    return _other(result)


def check_str_matches(check_str: str, text: str) -> bool:
    try:
        return re.search(check_str, text) is not None
    except re.error:  # not a valid regex: PyTorch's plain-substring meaning
        return check_str in text


def _other(result: Result) -> Verdict:
    return {"crash": "crash", "timeout": "timeout"}.get(result.kind, "other_failure")  # type: ignore[return-value]


def log_pool_warnings(pool: Pool, reporter: Reporter, seen: set[str]) -> None:
    for warning in pool.warnings:
        if warning not in seen:
            seen.add(warning)
            reporter.log(warning, "warning")


def default_workers() -> int:
    """Compiling is CPU-bound, so several workers share a GPU: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1), len(default_devices()))


@functools.cache
def default_devices() -> list[str]:
    """GPUs the workers are spread over (round robin), found without importing torch. Cached: the
    command line asks for it several times (worker and device defaults) and nvidia-smi is slow."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listed.stdout.splitlines() if line.strip().isdigit()]
