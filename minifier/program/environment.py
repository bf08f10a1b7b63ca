"""What PyTorch's bug-report template asks for about the machine: `python -m minifier.program.environment`.

Runs as its own process (it imports torch; `aoti-minify report`, torch-free, starts it): reads on
stdin a JSON list of the launcher's config assignments `[module, attr, repr(value)]`, prints on
stdout one JSON object: versions, GPUs, the C++ compiler, which of those assignments differ from
this torch's defaults, and `torch.utils.collect_env`'s text (the block the template asks for).
"""

from __future__ import annotations

import ast
import json
import platform
import subprocess
import sys
from typing import Any


def _first_line(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({e})"
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if (proc.stdout or proc.stderr).strip() else ""


def _non_default(assignments: list[list[str]]) -> list[int]:
    import importlib

    changed = []
    for i, (module, attr, value) in enumerate(assignments):
        try:
            entry = importlib.import_module(module)._config[attr]
            if entry.default != ast.literal_eval(value):
                changed.append(i)
        except Exception:  # unknown to this torch, or not a literal: it is worth showing
            changed.append(i)
    return changed


def collect(assignments: list[list[str]]) -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    import torch

    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["hip"] = getattr(torch.version, "hip", None)
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    info["gpus"] = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        cxx = get_cpp_compiler()
        info["cxx"] = f"{cxx}: {_first_line([cxx, '--version'])}"
    except Exception as e:
        info["cxx"] = f"unknown ({type(e).__name__}: {e})"
    info["non_default"] = _non_default(assignments)
    try:
        from torch.utils.collect_env import get_pretty_env_info

        info["collect_env"] = get_pretty_env_info()
    except Exception as e:
        info["collect_env"] = f"torch.utils.collect_env failed: {type(e).__name__}: {e}"
    return info


def main() -> int:
    assignments = json.loads(sys.stdin.read() or "[]")
    json.dump(collect(assignments), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
