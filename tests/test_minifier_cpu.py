"""The minifier on real AOTI failures: PyTorch dumps them, g++ compiles every candidate."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import KEEP_WARM, ROOT, aoti_minify, child_env, done_of, events_of, minify, repro_signature, workers_in

from minifier.contract.events import (
    BeginEvent,
    CancelledEvent,
    CandidateEvent,
    CheckpointEvent,
    DoneEvent,
    ErrorEvent,
    EventsTail,
    FailureEvent,
    load_failure,
    parse_event,
)
from minifier.contract.launcher import read_launcher
from minifier.contract.layout import DumpLayout, launchers_in
from minifier.driver.evidence import Context
from minifier.driver.minify import PoolTester, Progress
from minifier.driver.options import Options
from minifier.driver.reporter import Reporter
from minifier.driver.search import Space, make_closure
from minifier.driver.session import Session
from minifier.exchange import worker_protocol as p
from minifier.exchange.worklog import logs_under, phase_marks

pytestmark = pytest.mark.compile


def final_graph(done: DoneEvent) -> str:
    with open(done.repro) as f:
        return f.read()


@pytest.mark.parametrize(
    "bug, kind", [("compile_error", "compile_error"), ("runtime_error", "runtime_error"), ("accuracy", "accuracy")]
)
@pytest.mark.slow
def test_seed_injections_shrink_to_the_single_relu(dumps, tmp_path, bug, kind):
    launcher = dumps.get(str(tmp_path), bug=bug, reproduced=True)  # `run` once, shared with the other tests
    failure = load_failure(DumpLayout.of(launcher).failure_json)
    assert failure.signature.kind == kind

    proc, done = minify(launcher)
    assert done.start_nodes == 3 and done.nodes == 1
    assert done.signature.matches(failure.signature)
    assert "torch.ops.aten.relu.default" in final_graph(done)
    checkpoints = [e for e in events_of(proc) if isinstance(e, CheckpointEvent)]
    assert [e.nodes for e in checkpoints] == sorted((e.nodes for e in checkpoints), reverse=True)
    for event in checkpoints:  # each checkpoint has its own program
        assert os.path.exists(event.path[:-3] + ".pt2")
    assert repro_signature(done.repro).matches(failure.signature)
    # repro level 4 for accuracy (dump.py), else 2; accuracy= written as PyTorch writes it
    assert f"accuracy={bug == 'accuracy'}," in open(launcher).read()
    assert f"accuracy={'accuracy' if bug == 'accuracy' else False!r}," in open(done.repro).read()


@pytest.mark.parametrize(
    "workload, culprit, compiler",
    [
        (None, "relu", "aoti"),
        (None, "relu", "torch.compile"),
        ("nn-cnn-relu-accuracy", "relu_", "aoti"),
        ("nn-mlp-dynamic-relu-accuracy", "relu", "aoti"),
        ("nn-mlp-uint8_any-accuracy", "any", "aoti"),
    ],
)
def test_the_accuracy_probe_s_slices_race_as_soon_as_it_answers(dumps, tmp_path, workload, culprit, compiler):
    # before the whole graph's verdict too: on two workers the probe's answer frees the worker that a round run
    # ahead of that verdict would take (RoBERTa's log1p: its 1-node slice started 1.4 s later, behind a half).
    # The CNN computes in place (ReLU(inplace=True), a residual +=) as torchvision's do: its first relu_, which
    # overwrites the batch norm's value, is named, not the classifier behind its flatten (a view).
    # A program of static sizes is probed just in time (no C++ wrapper to build); one with dims, whose sizes that
    # compile would specialize, in a package as its candidates are. Inductor's `any` of uint8 is bool, eager's
    # uint8 (pytorch/pytorch#198081): the dtype diverges there, the values only at the uint8 arithmetic after it.
    # torch.compile's graph (after_aot) is probed the same way, compiled as torch.compile compiles it.
    launcher = dumps.get(str(tmp_path), bug="accuracy", workload=workload, compiler=compiler)
    dynamic = workload == "nn-mlp-dynamic-relu-accuracy"
    session = Session.open(Options(launcher=launcher, accuracy="accuracy" if dynamic else None))
    pool = session.pool(size=1)
    try:
        graph = pool.call(p.DescribeRequest()).graph
        values = pool.call(p.ValuesRequest(path=session.layout.values)).stored
        order = graph.compute_nodes()
        space = Space(order=order, closure=make_closure(graph.compute_args(), set(values)))
        context = Context(session, pool, Reporter(False), space, graph)
        tester = PoolTester(context, Progress(start_nodes=len(order), nodes=len(order)))
        assert tester.accuracy.start()
        while tester.accuracy.probed is None:  # no round has started: nothing called probe_first
            tester.wait()
    finally:
        pool.close()
    node = next(n.name for n in graph.nodes if n.op == culprit)
    assert tester.accuracy.probed[0] == {node}  # the bug's node alone, the likeliest slice, first
    assert tester.leads() == tester.accuracy.probed
    log = open(os.path.join(session.layout.work, "worker-0.log")).read()
    assert ("compile probe, just in time" in log) != dynamic and ("probe.pt2" in log) == dynamic, log[-3000:]


def test_compile_error_names_kernel_line_and_model_line(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), reproduced=True)
    failure = json.load(open(os.path.join(os.path.dirname(launcher), "failure.json")))
    kernel = failure["kernel"]
    assert kernel["name"] == "cpp_fused_relu_sigmoid_0" and kernel["file"].endswith(".kernel.cpp")
    assert "compile error!" in failure["kernel_source"].splitlines()[kernel["line"] - 1]
    assert kernel["source_nodes"] == ["relu", "sigmoid"] and kernel["exact"]  # Inductor's provenance, not op names
    assert {line["node"] for line in failure["model_lines"]} == {"relu", "sigmoid"}
    assert all(line["file"].endswith("examples/models.py") for line in failure["model_lines"])


def test_multi_block_model_reaches_one_node_and_keeps_the_signature(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), model="residual", blocks=2, reproduced=True)
    _, done = minify(launcher)
    assert done.start_nodes > 10 and done.nodes == 1
    assert "relu" in final_graph(done).split("def forward")[1]
    # the whole graph's query needs none of the values: it started before the eager run that saves them ended
    marks = sorted(m for log in logs_under(os.path.dirname(launcher)) for m in phase_marks(open(log).read()))
    whole = next(t for t, step, detail in marks if step == "query" and detail.endswith("of all nodes"))
    assert whole < next(t for t, step, detail in marks if step == "answered" and detail == "ValuesStored"), marks


def test_general_search_without_slicing_reaches_one_node(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), model="residual", blocks=2, reproduced=True)
    _, done = minify(launcher, "--no-slice")
    assert done.nodes == 1
    assert done.queries <= 2 * done.start_nodes.bit_length() + 2  # ddmin with one culprit: ~2 log2(n)
    # The whole graph is the loaded program itself (no re-export); the worker left idle meanwhile is
    # warmed up for the next round.
    steps = [
        (step, detail)
        for log in glob.glob(os.path.join(os.path.dirname(launcher), "aoti-lens-work", "*.log"))
        for _, step, detail in phase_marks(open(log).read())
    ]
    assert any(step == "query" and detail.endswith("of all nodes") for step, detail in steps)
    assert ("answered", "Warmed") in steps


def test_killed_worker_does_not_stop_the_run(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), reproduced=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "minifier", "minify", launcher, "--events", "--workers", "1", *KEEP_WARM],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )
    killed = False
    for line in proc.stderr:
        if "minifying" in line and not killed:
            time.sleep(3)  # the worker is now compiling the first candidate
            workers = workers_in(os.path.dirname(launcher))
            assert workers, "no worker process found"
            os.killpg(workers[0], signal.SIGKILL)
            killed = True
    out = proc.stdout.read()
    assert proc.wait(timeout=600) == 0, out[-3000:]
    events = events_of(out)
    assert any(isinstance(e, CandidateEvent) and e.verdict == "crash" for e in events)
    assert done_of(events).nodes == 1


def test_workers_die_with_a_killed_driver(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "minifier", "minify", launcher, "--workers", "2", *KEEP_WARM],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )
    for line in proc.stderr:
        if "minifying" in line:
            break
    assert workers_in(os.path.dirname(launcher))
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15
    while workers_in(os.path.dirname(launcher)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert workers_in(os.path.dirname(launcher)) == []


def test_cancel_keeps_the_best_checkpoint_as_repro(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), model="residual", blocks=2, reproduced=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "minifier", "minify", launcher, "--events", "--workers", "2", "--no-slice", *KEEP_WARM],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=child_env(),
    )
    checkpoint = None
    for line in proc.stdout:
        event = parse_event(line)
        if isinstance(event, CheckpointEvent):
            checkpoint = event
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stdout.read()
    assert proc.wait(timeout=120) == 130
    assert checkpoint is not None
    cancelled = events_of(rest)[-1]
    assert isinstance(cancelled, CancelledEvent) and cancelled.checkpoint == checkpoint.path
    repro = os.path.join(os.path.dirname(launcher), "repro.py")
    assert open(repro).read().count("torch.ops.aten.") == open(checkpoint.path).read().count("torch.ops.aten.")
    assert workers_in(os.path.dirname(launcher)) == []
    failure = json.load(open(os.path.join(os.path.dirname(launcher), "failure.json")))
    assert repro_signature(repro).message == failure["signature"]["message"]


def test_a_graph_that_does_not_fail_says_so(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path))
    text = (
        open(launcher)
        .read()
        .replace("inject_relu_bug_TESTING_ONLY = 'compile_error'", "inject_relu_bug_TESTING_ONLY = None")
    )
    open(launcher, "w").write(text)
    for command in ("run", "minify"):
        proc = aoti_minify(command, launcher, "--events")
        assert proc.returncode == 1, proc.stderr[-2000:]
        error = events_of(proc)[-1]
        assert isinstance(error, ErrorEvent) and "does not fail" in error.message


def test_bad_inputs_get_clear_messages_and_exit_codes(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path))
    pt2 = os.path.join(os.path.dirname(launcher), "checkpoints", "exported_program.pt2")
    foreign = tmp_path / "foreign.py"
    foreign.write_text("from torch._dynamo.repro.after_aot import run_repro\nrun_repro(mod, args)\n")
    cases = [
        (["run", str(foreign)], 3, "without Repro or load_args"),
        (["run", str(tmp_path / "nothing.py")], 3, "no such file"),
        (["minify", launcher, "--output-dir", "/proc/aoti-lens-nowhere"], 3, "cannot create"),
    ]
    for args, code, message in cases:
        proc = aoti_minify(*args, "--events")
        assert proc.returncode == code, (args, proc.stderr[-2000:])
        assert message in events_of(proc)[-1].message
    no_compiler = aoti_minify("run", launcher, env={**os.environ, "CXX": "/nonexistent/g++"})
    assert no_compiler.returncode == 4 and "no C++ compiler" in no_compiler.stderr
    with open(pt2, "r+b") as f:
        f.truncate(100)
    corrupt = aoti_minify("run", launcher)
    assert corrupt.returncode == 3 and "cannot load" in corrupt.stderr
    os.remove(pt2)
    missing = aoti_minify("run", launcher)
    assert missing.returncode == 3 and "exported program is missing" in missing.stderr


def test_launcher_from_another_torch_version_runs_with_warnings(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path))
    text = open(launcher).read()
    text = re.sub(r"# torch version: \S+", "# torch version: 2.11.0+cu130", text)
    text = text.replace(
        "import torch._functorch.config\n",
        "import torch._functorch.config\ntorch._inductor.config.option_from_the_future = 3\n",
    )
    open(launcher, "w").write(text)
    proc = aoti_minify("run", launcher)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch 2.11.0+cu130" in proc.stderr and "option_from_the_future" in proc.stderr


USER_PROGRAM = """
import os, signal, torch
import torch._inductor.config as config
from minifier.examples.models import build
config.cpp.inject_relu_bug_TESTING_ONLY = "runtime_error"
model, inputs = build("seed")
program = torch.export.export(model, inputs)
try:
    torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(program))(*inputs)
except Exception:
    os.kill(os.getpid(), signal.SIGSEGV)  # the failure takes the whole process down, as CUDA errors can
"""


def test_capture_keeps_a_failure_that_kills_the_program(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(USER_PROGRAM)
    proc = aoti_minify("capture", "--dir", str(tmp_path), "--events", "--", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "killed by SIGSEGV" in proc.stderr
    failure = [e for e in events_of(proc) if e.event == "failure"][-1].failure
    assert failure.signature.exc_type == "RuntimeError" and "Unknown exception" in failure.signature.message
    assert failure.launcher.startswith(str(tmp_path / "torch_compile_debug"))
    # PyTorch dumped the program twice (before compiling, and after the failure): one snapshot holds both,
    # and it stands for PyTorch's own run folder.
    assert launchers_in(str(tmp_path / "torch_compile_debug")) == [failure.launcher]
    assert failure.launcher.endswith(".capture1/minifier/minifier_launcher.py")
    logged = EventsTail(DumpLayout.of(failure.launcher).events_log).read().events
    assert [(e.command, e.pid) for e in logged if isinstance(e, BeginEvent)] == [
        ("capture", logged[0].pid),
        ("run", logged[0].pid),
    ]
    assert isinstance(logged[-1], FailureEvent)


def test_capture_keeps_a_torch_compile_failure_that_kills_the_program(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        USER_PROGRAM.replace(
            "program = torch.export.export(model, inputs)\n", "compiled = torch.compile(model, dynamic=False)\n"
        ).replace("torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(program))", "compiled")
    )
    proc = aoti_minify(
        "capture", "--dir", str(tmp_path), "--compiler", "torch.compile", "--events", "--", sys.executable, str(script)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "killed by SIGSEGV" in proc.stderr
    failure = [e for e in events_of(proc) if e.event == "failure"][-1].failure
    assert failure.signature.exc_type == "RuntimeError" and failure.signature.kind == "runtime_error"
    assert failure.launcher.endswith(".capture1/minifier/minifier_launcher.py")
    assert read_launcher(failure.launcher).kind == "after_aot"


def test_report_of_a_minified_failure(dumps, tmp_path):
    pristine = dumps.get(str(tmp_path / "pristine"))
    assert aoti_minify("report", pristine).returncode == 3  # nothing to report before a repro exists
    launcher = dumps.get(str(tmp_path / "minified"), minified=True)  # `run`, then `minify`
    proc = aoti_minify("report", os.path.dirname(launcher), "--events")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [event] = events_of(proc)
    report = open(event.path).read()
    assert event.path == os.path.join(os.path.dirname(launcher), "report.md")
    assert report.startswith("# AOTI failure: CppCompileError: 'compile' was not declared in this scope")
    shrunk = re.search(r"from (\d+) to 1 graph node;", report)
    assert shrunk and int(shrunk.group(1)) > 1 and "error: ‘compile’ was not declared" in report
    assert "relu = torch.ops.aten.relu.default" in report
    # pasted into a public issue: no folder of this machine, placeholders that still read well
    assert str(tmp_path) not in report and sys.prefix not in report and "/torchinductor_" not in report
    assert re.search(r"<inductor cache>/\w+/\w+\.kernel\.cpp:\d+:\d+: error", report), report[:3000]
    # the repro inline is repro_standalone.py: one file, no repro.pt2 to attach
    assert "class Repro(torch.nn.Module)" in report and "attach that file" not in report
    assert "torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'" in report.split("Config:")[1]
    versions = report.split("### Versions")[1]
    assert f"| torch | {torch.__version__} |" in versions and "| C++ compiler |" in versions
    assert "PyTorch version:" in versions  # collect_env's block
