"""Make PyTorch dump a real AOTI failure: `python -m minifier.examples.dump --out DIR ...`.

Exports an example model, turns on one of Inductor's injected test bugs and PyTorch's own AOTI
minifier dump, and compiles. PyTorch writes DIR/torch_compile_debug/run_*/minifier/minifier_launcher.py;
its path is the last line printed. Runs as its own process because the failure is real.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

BUGS = ("compile_error", "runtime_error", "accuracy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minifier.examples.dump")
    parser.add_argument("--out", required=True, help="folder that receives torch_compile_debug/")
    parser.add_argument("--model", default="seed", choices=("seed", "residual"))
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--bug", default="compile_error", choices=BUGS)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)

    import torch
    import torch._dynamo.config
    import torch._inductor.config as inductor_config

    from .models import build

    os.makedirs(args.out, exist_ok=True)
    torch._dynamo.config.debug_dir_root = os.path.join(os.path.abspath(args.out), "torch_compile_debug")
    inductor_config.aot_inductor.dump_aoti_minifier = True
    if args.bug == "accuracy":
        inductor_config.aot_inductor.repro_level = 4
    backend = inductor_config.triton if args.device == "cuda" else inductor_config.cpp
    backend.inject_relu_bug_TESTING_ONLY = args.bug
    model, inputs = build(args.model, args.blocks)
    model, inputs = model.to(args.device), tuple(t.to(args.device) for t in inputs)
    with torch.no_grad():
        program = torch.export.export(model, inputs)
        try:
            torch._inductor.aoti_compile_and_package(program)
        except Exception as e:  # the point of this script: the failure is expected
            print(f"compile failed as intended: {type(e).__name__}", file=sys.stderr)
    launchers = sorted(glob.glob(os.path.join(torch._dynamo.config.debug_dir_root, "run_*", "minifier",
                                              "minifier_launcher.py")), key=os.path.getmtime)
    if not launchers:
        print("PyTorch wrote no launcher (did the bug not trigger?)", file=sys.stderr)
        return 1
    print(launchers[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
