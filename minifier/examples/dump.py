"""Make PyTorch dump a real AOTI failure: `python -m minifier.examples.dump --out DIR ...`.

Exports an example model (or `--workload NAME`, one of the real-model workloads of workloads.py),
turns on the Inductor config that makes it fail and PyTorch's own AOTI minifier dump, and compiles.
With `--compiler torch.compile` it calls the model under torch.compile instead, with torch.compile's own
minifier dump on (`repro_after="aot"`, or `--repro-after dynamo`).
PyTorch writes DIR/torch_compile_debug/run_*/minifier/minifier_launcher.py; its path is the last line
printed. The compile runs in a child process because the failure is real: some kill it (an exception
thrown inside an OpenMP region aborts), and with repro level 3 the launcher is written before that.
`--capture` runs that child under `aoti-minify capture`'s snapshots, and prints the snapshot's launcher:
for a failure after which PyTorch's own dump is corrupt (a CUDA device-side assert).
`--serve`, for callers that make many dumps (the tests), imports torch and Inductor once and forks each dump's
compile from there instead: a fresh interpreter spends most of a small dump's time importing them.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import subprocess
import sys
import tempfile
import traceback

BUGS = ("compile_error", "runtime_error", "accuracy")
TOY_MODELS = ("seed", "residual", "parity", "selected", "looped")  # models.TOY_MODELS, without importing torch here


def main(argv: list[str] | None = None, forked: bool = False) -> int:
    """Dump as the arguments say; with `forked`, the compile is a child forked from this process (`--serve`)."""
    parser = argparse.ArgumentParser(prog="python -m minifier.examples.dump")
    parser.add_argument("--serve", action="store_true", help="dump for each JSON list of arguments on stdin (below)")
    parser.add_argument("--out", help="folder that receives torch_compile_debug/ (required but with --serve)")
    parser.add_argument("--model", default="seed", choices=TOY_MODELS)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--bug", default="compile_error", choices=BUGS)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument(
        "--workload",
        default=None,
        help="a real-model workload (minifier/examples/workloads.py); it fixes the model, the failure and the device",
    )
    parser.add_argument(
        "--repro-level",
        type=int,
        default=None,
        choices=(1, 2, 3, 4),
        help="PyTorch's aot_inductor.repro_level (default: what the bug needs); 1 writes "
        "OUT/repro.py (command='run') instead of a launcher",
    )
    parser.add_argument(
        "--compiler",
        default="aoti",
        choices=("aoti", "torch.compile"),
        help="aoti_compile_and_package (AOTI's minifier dump), or torch.compile (its after_aot dump)",
    )
    parser.add_argument(
        "--repro-after",
        default="aot",
        choices=("aot", "dynamo"),
        help="with --compiler torch.compile: the graph its dump holds, after AOT autograd or Dynamo's",
    )
    parser.add_argument(
        "--capture",
        action="store_true",
        help="snapshot each dump as it appears, as `aoti-minify capture` does, and print the snapshot",
    )
    parser.add_argument("--compile-here", action="store_true", help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args(argv)
    if args.serve:
        return serve()
    if args.out is None:
        parser.error("the following arguments are required: --out")
    debug_dir = os.path.join(os.path.abspath(args.out), "torch_compile_debug")
    if args.compile_here:
        _compile(args, debug_dir)
        return 0
    own_argv = sys.argv[1:] if argv is None else argv
    child_argv = [sys.executable, "-m", "minifier.examples.dump", *own_argv, "--compile-here"]
    if args.capture:
        from minifier.driver.capture import capture

        snapshots = capture(child_argv, os.path.abspath(args.out), accuracy=False).launchers
        if not snapshots:
            print("PyTorch dumped nothing to snapshot (did the bug not trigger?)", file=sys.stderr)
            return 1
        print(snapshots[0])  # the dump written before compiling; a later one is PyTorch's after the failure
        return 0
    code = _compile_forked(args, debug_dir) if forked else subprocess.run(child_argv).returncode
    level_one = glob.glob(os.path.join(os.path.abspath(args.out), "repro.py"))  # PyTorch writes it to the cwd
    launchers = sorted(
        glob.glob(os.path.join(debug_dir, "run_*", "minifier", "minifier_launcher.py")) + level_one,
        key=os.path.getmtime,
    )
    if not launchers:
        print(
            f"PyTorch wrote no launcher (did the bug not trigger? the compile exited with {code})",
            file=sys.stderr,
        )
        return 1
    print(launchers[-1])
    return 0


def serve() -> int:
    """Each line of stdin is a dump's arguments (a JSON list); each line written back is what `main` exits with
    and prints for them: {"code", "stdout", "stderr"}. Ends with stdin."""
    import torch._inductor.compile_fx  # noqa: F401  (what every dump's compile imports)

    replies = sys.stdout
    for line in sys.stdin:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(json.loads(line), forked=True)
            except SystemExit as e:  # argparse's refusals
                code = e.code if isinstance(e.code, int) else 2
        replies.write(json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
        replies.flush()
    return 0


def _compile_forked(args: argparse.Namespace, debug_dir: str) -> int:
    """`_compile` in a forked child, which the failure may kill as it would a fresh process; its exit status as
    subprocess gives it (-N for signal N). What the child prints goes to this process's sys.stderr."""
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:  # the child: its output to the log, never to the parent's reply channel
            code = 1
            try:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
                _compile(args, debug_dir)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    if stream is not None:
                        stream.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        log.seek(0)
        sys.stderr.write(log.read().decode(errors="replace"))
    return os.waitstatus_to_exitcode(status)


def _compile(args: argparse.Namespace, debug_dir: str) -> None:
    import torch
    import torch._dynamo.config
    import torch._inductor.config as inductor_config

    os.makedirs(args.out, exist_ok=True)
    os.chdir(args.out)  # where a level-1 dump writes its repro.py
    torch._dynamo.config.debug_dir_root = debug_dir
    inductor_config.aot_inductor.dump_aoti_minifier = True
    model, inputs, dynamic_shapes, config = _workload(args.workload, args.compiler) if args.workload else _example(args)
    if args.repro_level is not None:
        config["aot_inductor.repro_level"] = args.repro_level
    if args.compiler == "torch.compile":  # torch.compile's dump, at the level AOTI's would have
        torch._dynamo.config.repro_after = args.repro_after
        torch._dynamo.config.repro_level = config.pop("aot_inductor.repro_level", 2)
    for key, value in config.items():  # dotted names, e.g. "cpp.inject_relu_bug_TESTING_ONLY"
        setattr(inductor_config, key, value)
    with torch.no_grad():
        if args.compiler == "torch.compile":
            try:
                torch.compile(model, dynamic=dynamic_shapes is not None)(*inputs)
            except Exception as e:
                print(f"compile failed as intended: {type(e).__name__}", file=sys.stderr)
            return
        program = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
        try:
            torch._inductor.aoti_compile_and_package(program)
        except Exception as e:  # the point of this script: the failure is expected
            print(f"compile failed as intended: {type(e).__name__}", file=sys.stderr)


def _example(args: argparse.Namespace) -> tuple:
    from .models import build

    model, inputs = build(args.model, args.blocks)
    config = {f"{'triton' if args.device == 'cuda' else 'cpp'}.inject_relu_bug_TESTING_ONLY": args.bug}
    if args.bug == "accuracy":
        config["aot_inductor.repro_level"] = 4
    return model.to(args.device), tuple(t.to(args.device) for t in inputs), None, config


def _workload(name: str, compiler: str) -> tuple:
    from .workloads import WORKLOADS, prepare

    if name not in WORKLOADS:
        raise SystemExit(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    prepared = prepare(WORKLOADS[name])
    level = prepared.repro_level if compiler == "aoti" else prepared.compile_repro_level
    config = {**prepared.inductor_config, "aot_inductor.repro_level": level}
    return prepared.model, prepared.inputs, prepared.dynamic_shapes, config


if __name__ == "__main__":
    sys.exit(main())
