"""The repro is the user's bug: its dynamic shapes, its data-dependent sizes, its control flow, its real
signatures, any dump kind PyTorch writes, wherever the dump now lies. Real AOTI compiles on CPU (g++)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import aoti_minify, events_of, make_dump, minify, program_facts, programs_facts, repro_signature

from minifier.contract.events import CheckpointEvent, LogEvent, StartEvent
from minifier.driver.options import Options
from minifier.driver.session import Session
from minifier.driver.verdicts import classify, raised_before_build
from minifier.exchange import worker_protocol as p
from minifier.processes.switches import STOPPED_AT_BUILD
from server.failures import read_disk

pytestmark = pytest.mark.compile
CUSTOM_OPS = "minifier.examples.custom_ops"


def graph_of(path: str) -> str:
    """The readable graph a checkpoint or repro.py carries in its leading comments."""
    return open(path).read().split("import os")[0]


def copied_away(folder: str, names: list[str], dest: str) -> str:
    os.makedirs(dest)
    for name in names:
        shutil.copyfile(os.path.join(folder, name), os.path.join(dest, name))
    return dest


@pytest.mark.slow
def test_a_failure_only_under_dynamic_shapes_survives_minification(dumps, tmp_path):
    """A custom op whose fake kernel is wrong only for symbolic sizes: the whole (dynamic) program gives wrong
    numbers, the same graph exported with static shapes does not. Candidates re-exported statically all pass
    and the search cannot shrink it; with the original's dims kept it shrinks to the op."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-dynamic_fake-accuracy")
    proc, done = minify(launcher, "--accuracy", "--import", CUSTOM_OPS)
    assert done.nodes < done.start_nodes and done.signature.kind == "accuracy"
    assert "pool_tokens" in graph_of(done.repro)
    # the lie is named before any compile: the fake kernel's sizes, its symbols bound to the inputs', and the op's
    lies = [e for e in events_of(proc) if isinstance(e, LogEvent) and "fake kernel" in e.message]
    assert [(e.level, e.message.split(": compiled")[0]) for e in lies] == [
        (
            "warning",
            "pool_tokens (aoti_lens_examples.pool_tokens.default): its fake kernel gives float32[2, 20, 32], "
            "the op returns float32[2, 16, 32]",
        )
    ]
    # the slices around its reader race first and one wins: the accuracy probe, a whole-graph compile, never runs
    assert "slices around the lying fake kernel's readers race first" in proc.stderr
    assert "accuracy probe" not in proc.stderr, proc.stderr[-3000:]
    # repro.py and repro_standalone.py run elsewhere on the original example sizes, and fail the same way
    away = copied_away(
        os.path.dirname(done.repro), ["repro.py", "repro.pt2", "repro_standalone.py"], str(tmp_path / "elsewhere")
    )
    checkpoints = [e.path[:-3] + ".pt2" for e in events_of(proc) if isinstance(e, CheckpointEvent)]
    *every, repro = programs_facts([*checkpoints, os.path.join(away, "repro.pt2")], CUSTOM_OPS)
    for facts in every:  # every checkpoint is dynamic
        assert sorted(facts["ranges"].values()) == [[1, 8], [2, 20]], facts  # the workload's Dim ranges
        assert any(not size.isdigit() for sizes in facts["sizes"] for size in sizes), facts
    assert repro["sizes"][0][2] == "32"
    for script in ("repro.py", "repro_standalone.py"):
        assert repro_signature(os.path.join(away, script), ("os", "torch", CUSTOM_OPS)).exc_type == "AccuracyError"
    standalone = open(os.path.join(away, "repro_standalone.py")).read()
    assert re.search(r"= Dim\('\w+', min=2, max=20\)", standalone) and "torch.randn((2, 16, 32)" in standalone


@pytest.mark.slow
def test_a_data_dependent_size_keeps_the_node_that_binds_it(dumps, tmp_path):
    """relu reads `h[h > 0.1]`, whose size is an unbacked symbol: cutting there would feed a concrete tensor
    of a backed size; the binding node (index) stays and the repro keeps the unbacked symbol."""
    launcher = dumps.get(str(tmp_path), model="selected")
    _, done = minify(launcher)
    graph = graph_of(done.repro)
    assert done.nodes == 2 and "aten.index.Tensor" in graph and "aten.relu" in graph, graph
    facts = program_facts(done.repro[:-3] + ".pt2")
    assert any(name.startswith("u") for name in facts["ranges"]), facts
    assert repro_signature(done.repro).exc_type == "CppCompileError"


@pytest.mark.slow
def test_torch_cond_and_its_branches_shrink(dumps, tmp_path):
    """The only relu (with its injected compile error) is inside a torch.cond branch of a real torch.nn model:
    the model around the cond goes, and so do the branches' other ops (`* 2.0`, `* 0.5`)."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-cond-relu-compile_error")
    proc, done = minify(launcher)
    graph = graph_of(done.repro)
    main, true_branch, false_branch = graph.split("def forward")[1:]
    assert done.nodes == 2 and "torch.ops.higher_order.cond" in main and "linear" not in main, graph
    assert "aten.relu" in true_branch and "aten.mul" not in true_branch + false_branch, graph
    assert repro_signature(done.repro).matches(done.signature)
    standalone = done.repro.replace("repro.py", "repro_standalone.py")
    assert "class TrueGraph0(torch.nn.Module)" in open(standalone).read()
    assert not events_of(proc)[-1].fallback  # minify ran it as a fresh script: it failed the same way


@pytest.mark.slow
def test_a_while_loop_minifies_as_a_unit_with_its_subgraphs(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), model="looped")
    proc, done = minify(launcher)
    main = graph_of(done.repro).split("def forward")[1]
    # the cut Linear's value is fed as an input that keeps its name ("linear"): no aten call of it is left
    assert "torch.ops.higher_order.while_loop" in main and "aten.linear" not in main and "aten.sigmoid" not in main, (
        main
    )
    assert repro_signature(done.repro).matches(done.signature)
    standalone = done.repro.replace("repro.py", "repro_standalone.py")
    assert "class WhileLoopBodyGraph0(torch.nn.Module)" in open(standalone).read()
    assert not events_of(proc)[-1].fallback  # minify ran it as a fresh script: it failed the same way


def test_inductor_buffer_names_do_not_split_one_real_bug(dumps, tmp_path):
    """torch 2.13's CPU codegen KeyError names an Inductor buffer whose number depends on the graph: 'buf4' in
    the model, 'buf1' in the 7-op repro of the same bug. One signature, and a compile-time kind."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-index_put_mask-keyerror")
    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-3000:]
    whole = events_of(run)[-1].failure
    assert whole.signature.exc_type == "KeyError" and whole.signature.kind == "compile_error"
    session = Session.open(Options(launcher=launcher))
    pool = session.pool(size=1)
    try:
        graph = pool.call(p.DescribeRequest()).graph
        pool.call(p.ValuesRequest(path=session.layout.values))
        nodes = graph.by_name()
        mask = [n.name for n in graph.nodes if n.op in ("full", "arange", "unsqueeze", "index_put_", "softmax")]
        masked_add = [n.name for n in graph.nodes if n.op == "add" and any(nodes[a].op == "index_put_" for a in n.args)]
        [result] = pool.evaluate(
            [p.QueryRequest(key="mask", program=p.KeptNodes(mask + masked_add, session.layout.values))],
            lambda r: True,
        )
    finally:
        pool.close()
    small = result.outcome.error
    assert small.signature.exc_type == "KeyError" and small.headline != whole.headline  # another buffer number
    assert small.signature.matches(whole.signature), (small.headline, whole.headline)


def test_a_candidate_that_reaches_the_build_of_a_failure_raised_before_it_passes_unbuilt(dumps, tmp_path):
    """The codegen KeyError is raised before the package's C++ build: a candidate stopped there passes, and one
    holding the bug still fails (compiled as far as the failure), so the verdicts are those of full compiles."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-index_put_mask-keyerror")
    session = Session.open(Options(launcher=launcher))
    pool = session.pool(size=1)
    try:
        graph = pool.call(p.DescribeRequest()).graph
        pool.call(p.ValuesRequest(path=session.layout.values))
        bug = [n.name for n in graph.nodes if n.op in ("full", "arange", "unsqueeze", "index_put_", "softmax")]
        nodes = graph.by_name()
        bug += [n.name for n in graph.nodes if n.op == "add" and any(nodes[a].op == "index_put_" for a in n.args)]
        linear = [n.name for n in graph.nodes if n.op == "linear"][:1]
        values = session.layout.values
        queries = [
            p.QueryRequest(key="whole", program=p.OriginalProgram()),
            p.QueryRequest(key="linear", program=p.KeptNodes(linear, values), stop_at_build=True),
            p.QueryRequest(key="bug", program=p.KeptNodes(bug, values), stop_at_build=True),
        ]
        results = {r.query.key: r for r in pool.evaluate(queries, lambda r: False)}
        whole, stopped, failing = (results[q.key] for q in queries)
    finally:
        pool.close()
    assert raised_before_build(whole) and whole.outcome.error.signature.exc_type == "KeyError"
    assert stopped.outcome.status == "passed" and stopped.outcome.built and stopped.outcome.text == STOPPED_AT_BUILD
    assert classify(stopped, whole.outcome.error.signature, None) == "passes"
    assert failing.outcome.built is False and classify(failing, whole.outcome.error.signature, None) == "fails"


def test_an_exception_without_a_message_is_told_by_where_and_when_it_was_raised(dumps, tmp_path):
    """torch.full with a complex fill value fails a bare `assert` in the C++ wrapper: `AssertionError: `."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-complex_full-assertion")
    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-3000:]
    signature = events_of(run)[-1].failure.signature
    assert signature.exc_type == "AssertionError" and signature.kind == "compile_error"
    assert (
        signature.message == "(no message) raised in torch._inductor.codegen.cpp_wrapper_cpu.fill_args while compiling"
    )
    _, done = minify(launcher)
    assert done.nodes == 1 and "aten.full.default" in graph_of(done.repro)
    proc = subprocess.run(
        [sys.executable, done.repro], capture_output=True, text=True, cwd=os.path.dirname(done.repro), timeout=600
    )
    assert re.search(r"^torch\._inductor\.exc\.InductorError: AssertionError: $", proc.stderr, re.M), proc.stderr[
        -2000:
    ]


def test_a_lifted_constant_stays_a_lifted_constant_in_candidates_and_repros(dumps, tmp_path):
    """cumsum of a 0-dim tensor made in forward fails to lower only while export lifts it as a constant
    (pytorch/pytorch#193265): as a buffer or an input it compiles, and the search would remove nothing."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-lifted_cumsum-indexerror")
    proc, done = minify(launcher)
    assert done.signature.exc_type == "IndexError" and done.start_nodes > done.nodes
    assert done.nodes <= 5 and "aten.cumsum.default" in graph_of(done.repro)
    [final] = [e for e in events_of(proc) if isinstance(e, CheckpointEvent) and e.nodes == done.nodes]
    assert program_facts(final.path[:-3] + ".pt2")["kinds"] == ["CONSTANT_TENSOR"]
    # the error names no node: the piece computed from constants alone is raced at once (17 queries without)
    assert final.queries <= 8, final
    standalone = done.repro.replace("repro.py", "repro_standalone.py")
    assert "buffer=True" not in open(standalone).read()  # written as a constant, not registered as a buffer
    for script in (done.repro, standalone):
        assert repro_signature(script).matches(done.signature), script
    # every node of that repro is needed: minified again, it says so, and never that it minimized anything
    again = aoti_minify("minify", final.path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"nothing removed from {done.nodes} nodes" in again.stdout and "minimized" not in again.stdout
    assert re.search(r"no smaller graph fails the same way: of (\d+) smaller candidates, \1 passed", again.stdout)


def test_a_model_that_writes_a_buffer_in_forward_minifies(dumps, tmp_path):
    """A KV cache written with copy_ and read back through the only relu (Inductor's injected compile error): the
    whole program, which mutates the buffer, reproduces in a worker, and the repro is the relu alone, fed by an
    input, since the compile error needs no buffer."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-cache-relu-compile_error")
    _, done = minify(launcher)
    assert done.signature.exc_type == "CppCompileError" and done.nodes == 1
    assert "aten.relu.default" in graph_of(done.repro) and "copy_" not in graph_of(done.repro)
    original = os.path.join(os.path.dirname(launcher), "checkpoints", "exported_program.pt2")
    assert "BUFFER" in program_facts(original)["kinds"]


def sha(path: str) -> str:
    return hashlib.sha1(open(path, "rb").read()).hexdigest()


def test_a_level_one_repro_is_minified_without_overwriting_it(tmp_path):
    """Repro level 1: PyTorch writes repro.py (command='run') into the cwd and its program into a run folder."""
    repro = make_dump(str(tmp_path), repro_level=1)
    assert repro == str(tmp_path / "repro.py") and "command='run'" in open(repro).read()
    before = sha(repro)
    proc, done = minify(repro)
    assert sha(repro) == before and "left as it is" in proc.stderr
    assert done.repro == str(tmp_path / "repro.minified" / "repro.py") and done.nodes == 1
    assert repro_signature(done.repro).exc_type == "CppCompileError"
    # our own repro.py is a launcher too; minifying it again writes beside it, into its own folder
    again = aoti_minify("run", done.repro)
    assert again.returncode == 0 and os.path.exists(tmp_path / "repro.minified" / "repro.minified" / "failure.json")


def test_a_dump_written_before_compiling_on_another_machine_writes_only_where_it_is_now(dumps, tmp_path):
    """Repro level 3 (the launcher written before compiling, for failures that kill the process), copied from
    another machine: the launcher names its .pt2 and save_dir by the absolute paths of that machine."""
    here = dumps.get(str(tmp_path / "orig"), repro_level=3)
    run_dir = os.path.dirname(os.path.dirname(here))
    moved = str(tmp_path / "moved" / "torch_compile_debug" / os.path.basename(run_dir))
    shutil.copytree(run_dir, moved)
    launcher = os.path.join(moved, "minifier", "minifier_launcher.py")
    foreign = str(tmp_path / "their-machine" / "torch_compile_debug" / os.path.basename(run_dir))
    text = open(launcher).read().replace(run_dir, foreign)
    open(launcher, "w").write(text)
    assert f"save_dir='{foreign}/minifier/checkpoints'" in text
    shutil.rmtree(run_dir)
    proc, done = minify(launcher)
    assert not os.path.exists(tmp_path / "their-machine")
    minifier = os.path.dirname(launcher)
    assert all(e.path.startswith(minifier + os.sep) for e in events_of(proc) if isinstance(e, CheckpointEvent))
    assert done.repro == os.path.join(minifier, "repro.py")
    assert read_disk(launcher).checkpoint_nodes == done.nodes  # the language server reads the same folder
    # the repro is portable: no path of either machine, and it runs from any folder
    repro_text = open(done.repro).read()
    assert not re.search(r"""['"](/|~)""", repro_text), re.findall(r""".*['"]/.*""", repro_text)
    assert "os.environ['TORCHINDUCTOR_CACHE_DIR']" in open(launcher).read()
    assert "os.environ['TORCHINDUCTOR_CACHE_DIR']" not in repro_text and "TORCHINDUCTOR_CACHE_DIR" in repro_text
    assert "accuracy=False," in repro_text
    away = copied_away(minifier, ["repro.py", "repro.pt2", "repro_standalone.py"], str(tmp_path / "away"))
    for script in ("repro.py", "repro_standalone.py"):
        assert repro_signature(os.path.join(away, script)).matches(done.signature)


@pytest.mark.parametrize("flag, op", [("--strict-accuracy", "log1p"), ("--accuracy", "relu")])
def test_strict_accuracy_parity_with_pytorch(dumps, tmp_path, flag, op):
    """PyTorch's test_accuracy_vs_strict_accuracy: relu's and log1p's accuracy bugs both injected; only relu
    changes the output, log1p changes a boolean mask. Strict accuracy ends at log1p, accuracy at relu."""
    launcher = dumps.get(str(tmp_path), workload="toy-parity-relu_and_log1p-accuracy")
    _, done = minify(launcher, flag)
    graph = graph_of(done.repro).split("def forward")[1]
    assert done.nodes == 1 and f"aten.{op}.default" in graph, graph
    assert f"accuracy={flag.lstrip('-').replace('-', '_')!r}," in open(done.repro).read()


EFFECTFUL = """
import torch
import torch._inductor.config as config

config.aot_inductor.dump_aoti_minifier = True
config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"


class Effectful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        torch.ops.aten._print("between the relu and the sigmoid")
        return torch.sigmoid(h) * 2


torch.manual_seed(0)
program = torch.export.export(Effectful(), (torch.randn(2, 8),))
try:
    torch._inductor.aoti_compile_and_package(program)
except Exception as e:
    print("compile failed as intended:", type(e).__name__)
"""


def test_an_effectful_op_in_forward_is_kept_or_cut_as_any_other_node(tmp_path):
    """aten._print is effectful: torch.export keeps it as a node without users, AOT autograd threads its order through
    effect tokens. Candidates with and without it compile; the search ends at the relu."""
    script = tmp_path / "effectful.py"
    script.write_text(EFFECTFUL)
    made = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert "compile failed as intended" in made.stdout, made.stderr[-3000:]
    [launcher] = (tmp_path / "torch_compile_debug").glob("run_*/minifier/minifier_launcher.py")
    proc, done = minify(str(launcher))
    start = next(e for e in events_of(proc) if isinstance(e, StartEvent))
    assert "torch.ops.aten._print.default" in start.graph, start.graph
    assert done.nodes == 1 and "aten.relu" in graph_of(done.repro) and done.signature.exc_type == "CppCompileError"
