"""`aoti-minify`: reproduce and minify PyTorch AOTInductor failures."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback

from ..contract import __version__, interrupts
from ..contract.artifacts import DiskFull, OutputError
from ..contract.calls import CALLS
from ..contract.events import (
    EXIT_MEANINGS,
    KEEP_WARM_SECONDS,
    SCHEMA_VERSION,
    Command,
    ErrorEvent,
    ExitCode,
    FailureEvent,
    ReportEvent,
    VersionsEvent,
    error_code,
    exit_code,
    load_versions,
)
from ..contract.launcher import BadLauncher
from ..contract.layout import VERSIONS_JSON
from ..contract.lock import DumpBusy
from ..contract.procs import alive
from ..processes.pool import PoolError
from .devices import default_devices, default_workers
from .options import Options
from .reporter import Reporter
from .session import Session
from .versions import ENVIRONMENTS


def _bool(text: str) -> bool:
    """Unlike PyTorch's `type=bool`, 'False' means False."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _power_of_two(text: str) -> int:
    value = int(text)
    if value < 1 or value & (value - 1):
        raise argparse.ArgumentTypeError("--max-granularity must be a power of 2")
    return value


def version_text() -> str:
    """aoti-lens's version, its events schema, and the torch and Triton it would run with (read from the
    installed distributions: the driver never imports torch)."""

    def installed(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"aoti-minify {__version__} (events schema {SCHEMA_VERSION}); "
        f"torch {installed('torch')}, triton {installed('triton')} ({sys.executable})"
    )


def build_parser() -> argparse.ArgumentParser:
    exits = "\n".join(f"  {int(code):<4}{meaning}" for code, meaning in EXIT_MEANINGS.items())
    parser = argparse.ArgumentParser(
        prog="aoti-minify",
        description=__doc__,
        epilog=f"Exit codes (stable; the language server relies on them):\n{exits}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("launcher", help="minifier_launcher.py, a level-1 repro.py, or its run_* / minifier folder")
        sub.add_argument("--events", action="store_true", help="print JSON-lines events on stdout")
        sub.add_argument(
            "--timeout", type=float, default=600.0, help="seconds per candidate before its worker is killed"
        )
        sub.add_argument(
            "--keep-warm",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="keep the workers' fork server (torch imported) for SECONDS after this run, so that "
            "the next run with the same environment starts warm; it never outlives the process "
            "that started aoti-minify (the language server, your shell) or --owner's",
        )
        sub.add_argument(
            "--devices", default="", help="GPU ids for the workers, e.g. 0,1 (CUDA_VISIBLE_DEVICES per worker)"
        )
        sub.add_argument("--check-str", default=None, help="regex the error must match (default: same signature)")
        sub.add_argument(
            "--wait",
            action="store_true",
            help="when another aoti-minify works on this dump, wait for it to finish instead of exiting 6 "
            "(a reproduction, `aoti-minify run`, is waited for without it)",
        )
        sub.add_argument("--output-dir", default=None, help="write outputs here instead of the launcher's folder")
        sub.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="MODULE",
            help="import MODULE in every worker first (libraries that register custom ops)",
        )
        sub.add_argument(
            "--owner",
            type=int,
            default=None,
            metavar="PID",
            help="stop, as when cancelled, once process PID is gone (the language server passes its "
            "own, so that a killed editor leaves no minifier behind); a fork server kept warm is PID's, "
            "for its next runs (default: this command's parent's)",
        )
        accuracy = sub.add_mutually_exclusive_group()
        accuracy.add_argument(
            "--accuracy",
            dest="accuracy",
            action="store_const",
            const="accuracy",
            default=None,
            help="fail on fp64-checked accuracy divergence (AccuracyError)",
        )
        accuracy.add_argument("--strict-accuracy", dest="accuracy", action="store_const", const="strict_accuracy")
        accuracy.add_argument("--no-accuracy", dest="accuracy", action="store_const", const="")

    run = commands.add_parser("run", help="reproduce the failure once and write failure.json")
    common(run)
    minify = commands.add_parser("minify", help="shrink the failing graph to a minimal repro.py")
    common(minify)
    minify.add_argument("--workers", type=int, default=default_workers(), help="parallel worker processes")
    minify.add_argument("--max-granularity", type=_power_of_two, default=None)
    minify.add_argument("--skip-sanity", action="store_true", help="do not re-check that the whole graph fails")
    minify.add_argument(
        "--skip-export-error",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="treat un-exportable candidates as passing (true) or stop (false)",
    )
    minify.add_argument("--minifier-export-mode", dest="export_mode", choices=("python", "dynamo"), default="python")
    minify.add_argument(
        "--offload-to-disk",
        action="store_true",
        help="accepted for PyTorch parity: intermediates always live on disk, memory-mapped",
    )
    minify.add_argument("--save-dir", default=None, help="folder for checkpoints/<N>.py (default: the launcher's)")
    minify.add_argument("--copy-to", default=None, metavar="DIR", help="also copy repro.py and repro.pt2 to DIR")
    slicing = minify.add_mutually_exclusive_group()
    slicing.add_argument(
        "--no-slice",
        dest="slicing",
        action="store_false",
        help="no guesses (kernel-origin slices, the accuracy probe): the general search only",
    )
    slicing.add_argument(
        "--slices-first",
        action="store_true",
        help="wait for the guesses before the general search instead of racing them beside it",
    )

    triage = commands.add_parser(
        "triage",
        help="find Inductor configs that make the original compile and match eager (a workaround), and name "
        "the culprit; minifies first when there is no repro.py; writes triage.json",
    )
    common(triage)
    triage.add_argument("--workers", type=int, default=default_workers(), help="parallel worker processes")
    triage.add_argument(
        "--verify", type=int, default=2, metavar="N", help="workarounds to check on the original at most (default 2)"
    )
    triage.add_argument(
        "--runs",
        type=int,
        default=2,
        metavar="N",
        help="runs of the original unchanged, failure.json's counted: does it fail every time? (default 2)",
    )

    warm = commands.add_parser(
        "warm",
        help="start the workers' fork server (torch imported) for this launcher and "
        "leave it for the next run with --keep-warm; the language server does this on discovery",
    )
    warm.add_argument("launcher")
    warm.add_argument(
        "--keep-warm",
        type=float,
        default=KEEP_WARM_SECONDS,
        metavar="SECONDS",
        help=f"how long it waits for that run (default {KEEP_WARM_SECONDS:g})",
    )
    warm.add_argument("--devices", default="", help="as for the run it is for")
    warm.add_argument(
        "--owner", type=int, default=None, metavar="PID", help="whose it is (default: this command's parent)"
    )

    capture = commands.add_parser(
        "capture",
        help="run a program so that AOTI (or torch.compile) failures that kill it are still dumped",
        description="aoti-minify capture [--dir DIR] [--compiler torch.compile] -- python train.py ...",
    )
    capture.add_argument("--dir", default=".", help="folder that receives torch_compile_debug/ (default: .)")
    capture.add_argument(
        "--compiler",
        default="aoti",
        choices=("aoti", "torch.compile"),
        help="whose dumps to turn on: aoti_compile_and_package's (default) or torch.compile's (repro_after='aot', "
        "each graph dumped before it runs; its compile errors are then not dumped, and AOTI compiles fail)",
    )
    capture.add_argument("--accuracy", action="store_true", help="also dump on accuracy failures (repro level 4)")
    capture.add_argument("--events", action="store_true", help="print JSON-lines events on stdout")
    capture.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE in the workers that reproduce what was captured",
    )
    capture.add_argument("program", nargs=argparse.REMAINDER, help="-- the command to run")

    report = commands.add_parser(
        "report",
        help="write report.md beside repro.py: a PyTorch bug report (error, "
        "minimal graph, repro inline, config, versions)",
    )
    report.add_argument("launcher")
    report.add_argument("--output", default=None, help="write it here instead of beside repro.py")
    report.add_argument(
        "--no-versions",
        dest="versions",
        action="store_false",
        help="do not start torch to collect the versions (faster)",
    )
    report.add_argument("--events", action="store_true", help="print JSON-lines events on stdout")

    versions = commands.add_parser(
        "versions",
        help="run the minimal repro under other torch releases (each in an environment uv makes): which have the bug",
        description="aoti-minify versions DUMP [--releases 2.9.1,2.15.0] [--find-links DIR [--offline]]",
    )
    versions.add_argument("launcher")
    versions.add_argument(
        "--releases",
        default="",
        help="comma-separated releases, each run (default: bisect the newest patch of each minor from 2.9)",
    )
    versions.add_argument("--find-links", default=None, metavar="DIR", help="a folder of torch wheels to install from")
    versions.add_argument("--index-url", default=None, help="another package index (nightly wheels, a mirror)")
    versions.add_argument("--offline", action="store_true", help="install from --find-links only")
    versions.add_argument("--timeout", type=float, default=600.0, help="seconds per release's run (default 600)")
    versions.add_argument("--events", action="store_true", help="print JSON-lines events on stdout")
    versions.add_argument(
        "--envs", default=ENVIRONMENTS, metavar="DIR", help=f"where the environments are kept ({ENVIRONMENTS})"
    )

    demo = commands.add_parser("demo", help="dump the bundled failing model, then reproduce and minify it")
    demo.add_argument("--dir", default="aoti-lens-demo", help="folder for the dump (default ./aoti-lens-demo)")
    demo.add_argument("--device", default=None, choices=("cpu", "cuda"), help="default: cuda when available")
    demo.add_argument("--bug", default="compile_error", choices=("compile_error", "runtime_error", "accuracy"))
    demo.add_argument("--model", default="seed", choices=("seed", "residual"))
    demo.add_argument("--workers", type=int, default=default_workers())
    return parser


def main(argv: list[str] | None = None) -> int:
    interrupts.install()
    args = build_parser().parse_args(argv)
    if getattr(args, "owner", None):
        _stop_with(args.owner)
    if args.command == "demo":
        return demo(args)
    if args.command == "capture":
        return capture(args)
    if args.command == "versions":
        return versions(args)
    if args.command == "report":
        return report(args)
    options = Options(**{k: v for k, v in vars(args).items() if k in Options.__dataclass_fields__})
    options.devices = [d for d in args.devices.split(",") if d] or list(default_devices())
    if args.command == "warm":
        return warm(options)
    return execute(args.command, options)


def warm(options: Options) -> int:
    reporter = Reporter(False)
    try:
        Session.open(options).warm_up()
    except (BadLauncher, OutputError) as e:
        return _fail(reporter, ExitCode.BAD_INPUT, str(e))
    except PoolError as e:
        return _fail(reporter, ExitCode.ENVIRONMENT, str(e))
    reporter.result(f"the workers' fork server is warm for {options.keep_warm:g} s")
    return ExitCode.OK


def execute(command: Command, options: Options) -> int:
    reporter = Reporter(options.events)
    from . import minify as minify_mod

    try:
        session = Session.open(options)
        with session.exclusive(command, reporter):
            return _execute(command, session, reporter)
    except KeyboardInterrupt:
        return ExitCode.CANCELLED
    except DumpBusy as e:
        return _fail(reporter, ExitCode.BUSY, str(e))
    except DiskFull as e:
        return _fail(reporter, ExitCode.ENVIRONMENT, str(e))
    except (BadLauncher, OutputError) as e:
        return _fail(reporter, ExitCode.BAD_INPUT, str(e))
    except minify_mod.DoesNotFail as e:
        return _fail(reporter, ExitCode.DID_NOT_FAIL, str(e))
    except minify_mod.ExportFailed as e:
        return _fail(reporter, ExitCode.BAD_INPUT, str(e))
    except PoolError as e:
        return _fail(reporter, exit_code(e.code), str(e))
    except Exception as e:  # a bug in aoti-lens: say so, with the traceback, in the documented way
        reporter.say(traceback.format_exc())
        return _fail(
            reporter,
            ExitCode.INTERNAL,
            f"aoti-lens internal error: {type(e).__name__}: {e} (please report it with the traceback above)",
        )
    finally:
        reporter.close()


def _execute(command: Command, session: Session, reporter: Reporter) -> int:
    from . import minify as minify_mod
    from .reproduce import reproduce

    if session.layout.root != session.layout.minifier_dir:
        reporter.say(f"outputs go to {session.layout.root} ({session.spec.path} is left as it is)")
    if command == "run":
        failure = session.reproduced_meanwhile()
        reused = failure is not None
        if failure is not None:  # the events say what a run of its own would have said
            reporter.emit(FailureEvent(path=session.layout.failure_json, failure=failure))
        else:
            failure = reproduce(session, reporter)
        if failure is None:
            return _fail(
                reporter,
                ExitCode.DID_NOT_FAIL,
                "the program does not fail here"
                + (f" with an error matching {session.check_str!r}" if session.check_str else ""),
            )
        reporter.result(f"reproduced: {failure.signature.describe()}")
        if failure.kernel and failure.kernel.file:
            reporter.result(f"kernel: {failure.kernel.name or '?'} at {failure.kernel.file}:{failure.kernel.line}")
        for line in failure.model_lines:
            reporter.result(f"model: {line.file}:{line.line} ({line.node})")
        reporter.result(f"{'the run it waited for wrote' if reused else 'wrote'} {session.layout.failure_json}")
        return ExitCode.OK
    if command == "triage":
        return _triaged(session, reporter)
    done = minify_mod.minify(session, reporter)
    shrunk = f"minimized {done.start_nodes} -> {done.nodes} nodes"
    reporter.result(
        f"{f'nothing removed from {done.nodes} nodes' if done.unreduced else shrunk} in {done.queries} queries, "
        f"{done.seconds:.1f} s; reproduces {done.signature.describe() if done.signature else 'the failure'}"
        + (f"\n{done.unreduced}" if done.unreduced else "")
    )
    reporter.result(f"standalone: {session.layout.repro_standalone}")
    reporter.result(f"repro: {done.repro}")  # last: scripts read the repro's path from the last line
    return ExitCode.OK


def _triaged(session: Session, reporter: Reporter) -> int:
    from .triage import triage

    found = triage(session, reporter)
    culprit = found.culprit
    reporter.result(f"culprit: {', '.join(culprit.ops) or '?'} ({culprit.phase}; {culprit.subsystem})")
    if culprit.detail:
        reporter.result(f"  {culprit.detail}")
    reporter.result(
        f"the original failed {found.failures} of {found.runs} unchanged runs"
        + ("" if found.deterministic else ": not deterministic")
    )
    call = CALLS[session.spec.kind]
    for workaround in found.workarounds:
        error = "n/a" if workaround.max_abs_error is None else f"{workaround.max_abs_error:.2g}"
        how = call.passing(workaround.inductor_configs)
        if workaround.code:
            how = f"before {call.name}, run\n" + textwrap.indent(workaround.code, "    ")
        verified = f"verified on the original ({workaround.compile_s:.1f} s, max abs error {error})"
        reporter.result(f"workaround, {verified}: {how}")
    upgrade = _upgrade(session)
    if upgrade:
        reporter.result(f"releases (aoti-minify versions): {upgrade}")
    if not found.workarounds and not found.tried:
        reporter.result("no Inductor config tried: the fix is the culprit's own code")
    elif not found.workarounds:
        reporter.result(f"no workaround among {found.tried} config changes tried")
    reporter.result(f"triage: {session.layout.triage_json}")  # last: scripts read the path from the last line
    return ExitCode.OK


def _upgrade(session: Session) -> str | None:
    """What `aoti-minify versions` found of upgrading torch, run on the original program; None where it has not run
    or found no newer release that passes."""
    try:
        return load_versions(session.layout.versions_json).upgrade()
    except (OSError, ValueError):
        return None


def _fail(reporter: Reporter, code: ExitCode, message: str) -> int:
    reporter.emit(ErrorEvent(code=error_code(code), message=message))
    reporter.say(f"error: {message}")
    return code


def _stop_with(owner: int) -> None:
    """Cancel this run (SIGTERM: repro.py from the best checkpoint) once process `owner` is gone. When
    it is the parent, reparenting says so at once, even before the dead owner is reaped."""
    is_parent = os.getppid() == owner

    def watch() -> None:
        while (os.getppid() == owner) if is_parent else alive(owner):
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="owner-watch").start()


def capture(args: argparse.Namespace) -> int:
    from .capture import capture as run_captured

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    reporter = Reporter(args.events)
    if not program:
        return _fail(reporter, ExitCode.USAGE, "nothing to run: aoti-minify capture -- python train.py")
    try:
        captured = run_captured(program, args.dir, args.accuracy, args.compiler)
    except ValueError as e:
        return _fail(reporter, ExitCode.BAD_INPUT, str(e))
    reporter.say(f"the program {captured.exit_status}; captured {len(captured.launchers)} dump(s)")
    if not captured.launchers:
        return _fail(
            reporter,
            ExitCode.DID_NOT_FAIL,
            "no AOTI compile was dumped: did the program call torch._inductor.aoti_compile_and_package?"
            if args.compiler == "aoti"
            else "no torch.compile graph was dumped: did the program run a torch.compile'd function?",
        )
    codes = [
        execute("run", Options(launcher=path, events=args.events, imports=args.imports)) for path in captured.launchers
    ]
    return ExitCode.OK if ExitCode.OK in codes else min(codes)


def report(args: argparse.Namespace) -> int:
    from .report import NothingToReport, write_report

    reporter = Reporter(args.events)
    try:
        written = write_report(args.launcher, args.output, args.versions)
    except (BadLauncher, NothingToReport) as e:
        return _fail(reporter, ExitCode.BAD_INPUT, str(e))
    except OSError as e:
        return _fail(reporter, ExitCode.BAD_INPUT, f"cannot write the report: {e}")
    reporter.emit(ReportEvent(path=written.path))
    reporter.result(f"wrote {written.path}")
    return ExitCode.OK


def versions(args: argparse.Namespace) -> int:
    from .releases import Sources
    from .versions import CannotCheck, VersionsOptions, check_versions

    reporter = Reporter(args.events)
    if args.offline and not args.find_links:
        return _fail(reporter, ExitCode.USAGE, "--offline installs from a wheel folder: name it, --find-links")
    options = VersionsOptions(
        releases=[r.strip() for r in args.releases.split(",") if r.strip()],
        sources=Sources(find_links=args.find_links, index_url=args.index_url, offline=args.offline),
        timeout=args.timeout,
        environments=args.envs,
    )
    try:
        found = check_versions(args.launcher, options, say=reporter.say)
    except (BadLauncher, CannotCheck) as e:
        return _fail(reporter, ExitCode.BAD_INPUT, str(e))
    except OSError as e:
        return _fail(reporter, ExitCode.ENVIRONMENT, f"cannot write versions.json: {e}")
    path = os.path.join(os.path.dirname(found.script), VERSIONS_JSON)
    reporter.emit(VersionsEvent(path=path, releases=found.line()))
    reporter.result(found.line())
    reporter.result(f"versions: {path}")
    return ExitCode.OK


def demo(args: argparse.Namespace) -> int:
    """The embedded default: a real failing model, dumped by PyTorch, reproduced and minified."""
    device = args.device or _default_device()
    print(
        f"[aoti-minify] dumping the bundled {args.model} model with the injected {args.bug} on {device} "
        f"into {os.path.abspath(args.dir)}",
        file=sys.stderr,
    )
    dump = subprocess.run(
        [
            sys.executable,
            "-m",
            "minifier.examples.dump",
            "--out",
            args.dir,
            "--model",
            args.model,
            "--bug",
            args.bug,
            "--device",
            device,
        ],
        capture_output=True,
        text=True,
    )
    if dump.returncode != 0 or not dump.stdout.strip():
        print(dump.stderr[-3000:], file=sys.stderr)
        print("[aoti-minify] error: PyTorch did not dump a launcher", file=sys.stderr)
        return ExitCode.ENVIRONMENT
    launcher = dump.stdout.strip().splitlines()[-1]
    print(f"[aoti-minify] PyTorch dumped {launcher}", file=sys.stderr)
    options = Options(launcher=launcher, workers=args.workers)
    code = execute("run", options)
    return code if code != ExitCode.OK else execute("minify", options)


def _default_device() -> str:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
    )
    return "cuda" if probe.stdout.strip() == "True" else "cpu"


if __name__ == "__main__":
    sys.exit(main())
