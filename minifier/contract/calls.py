"""The user's compile call, where a workaround goes: AOTI's `aoti_compile_and_package(ep, inductor_configs=...)` or
`torch.compile(model, options=...)`, both handing Inductor its configs.

Torch-free: the CLI, report.md and the language server's quick fix write a workaround with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .launcher import LauncherKind


@dataclass(frozen=True)
class CompileCall:
    name: str  # as the user's code calls it
    keyword: str  # the keyword argument that takes Inductor's configs
    pattern: re.Pattern[str]  # the call's start, up to its opening parenthesis
    template: str  # the call as report.md shows it, `{}` where its configs go

    def passing(self, configs: dict[str, Any]) -> str:
        return f"{self.keyword}={configs!r}"

    def shipped(self, configs: dict[str, Any]) -> str:
        """The call that ships a workaround of configs (none: the plain call)."""
        return self.template.format(f", {self.passing(configs)}" if configs else "")


AOTI = CompileCall(
    "aoti_compile_and_package",
    "inductor_configs",
    re.compile(r"\baoti_compile_and_package\s*\("),
    "torch._inductor.aoti_compile_and_package(ep{})",
)
TORCH_COMPILE = CompileCall("torch.compile", "options", re.compile(r"\btorch\.compile\s*\("), "torch.compile(model{})")
CALLS: dict[LauncherKind, CompileCall] = {"aoti": AOTI, "after_aot": TORCH_COMPILE}
