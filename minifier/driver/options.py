"""What one `aoti-minify run|minify|warm` is asked to do: its command-line options as one dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


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
    export_mode: Literal["python", "dynamo"] = "python"
    max_granularity: int | None = None
    skip_sanity: bool = False
    skip_export_error: bool = True
    offload_to_disk: bool = False
    copy_to: str | None = None
    slicing: bool = True
    slices_first: bool = False  # wait for the guesses before the search (what racing them replaced)
    imports: list[str] = field(default_factory=list)
    keep_warm: float = 0.0
    owner: int | None = None  # the run stops once it is gone, and a warm fork server is its (default: the parent)
    wait: bool = False  # queue behind any run on the dump instead of refusing (a reproduction is always waited for)
    verify: int = 2  # triage: workarounds checked on the original at most (each one compile of the model)
    runs: int = 2  # triage: unchanged runs of the original that tell a deterministic failure from a flaky one
