"""torch.compile's own launchers (repro_after="aot" or "dynamo"): the same run and minify as AOTI dumps, compiled
as torch.compile compiles (real compiles on CPU)."""

import json
import os
import shutil

import pytest
from conftest import aoti_minify, events_of, minify, program_facts, repro_signature

from minifier.contract.launcher import read_launcher
from minifier.processes.switches import STOPPED_AT_BUILD

pytestmark = pytest.mark.compile


def test_a_torch_compile_failure_minifies_to_the_relu_and_its_repros_run_with_plain_torch(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), bug="compile_error", compiler="torch.compile")
    assert read_launcher(launcher).kind == "after_aot"
    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-4000:]
    failure = events_of(run)[-1].failure
    assert failure.signature.kind == "compile_error" and "CppCompileError" in failure.signature.exc_type
    # the Python wrapper builds each C++ kernel as `kernel`: named, and traced to its nodes, as under AOTI
    assert failure.kernel.name.startswith("cpp_fused") and failure.kernel.exact
    assert "relu" in failure.kernel.source_nodes
    saved = json.load(open(os.path.join(os.path.dirname(launcher), "failure.json")))
    assert saved["signature"]["kind"] == "compile_error"

    _, done = minify(launcher)
    assert done.nodes == 1 < done.start_nodes and done.signature.matches(failure.signature)
    repro = open(done.repro).read()
    assert "torch.ops.aten.relu.default" in repro and "compile_fx_inner" in repro
    assert "aoti_compile_and_package" not in repro  # compiled as torch.compile compiles, not by AOTI
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(os.path.dirname(done.repro), elsewhere, ignore=shutil.ignore_patterns("aoti-lens-work"))
    for script in ("repro.py", "repro_standalone.py"):
        assert repro_signature(str(elsewhere / script)).matches(failure.signature), script

    triage = aoti_minify("triage", launcher)  # workarounds written as torch.compile users pass them
    assert triage.returncode == 0, triage.stderr[-4000:]
    assert "before torch.compile, run" in triage.stdout or "options={" in triage.stdout, triage.stdout
    assert "inductor_configs" not in triage.stdout and "aoti_compile_and_package" not in triage.stdout
    report = aoti_minify("report", launcher)
    assert report.returncode == 0, report.stderr[-4000:]
    text = open(os.path.join(os.path.dirname(launcher), "report.md")).read()
    assert text.startswith("# torch.compile failure: CppCompileError") and "torch.compile(model" in text


def test_a_torch_compile_accuracy_failure_minifies_and_its_checkpoint_minifies_again(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), bug="accuracy", compiler="torch.compile")
    spec = read_launcher(launcher)
    assert spec.kind == "after_aot" and spec.accuracy == "accuracy"
    _, done = minify(launcher)
    assert done.nodes == 1 and done.signature.kind == "accuracy"
    again = read_launcher(done.repro)  # our repro.py is a torch.compile launcher too
    assert again.kind == "after_aot" and not again.traced and again.accuracy == "accuracy" and os.path.isfile(again.pt2)
    proc = aoti_minify("run", done.repro, "--events")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert events_of(proc)[-1].failure.signature.matches(done.signature)


def test_a_dynamo_level_launcher_compiles_through_aot_autograd_and_keeps_a_tensor_made_in_forward_a_constant(
    dumps, tmp_path
):
    # `torch.tensor(0.5).cumsum(0)` in forward: AOT autograd keeps the tensor a constant, whose cumsum Inductor
    # cannot lower (pytorch/pytorch#193265); as a buffer or an input, it compiles
    workload = "nn-mlp-lifted_cumsum-indexerror"
    launcher = dumps.get(str(tmp_path), workload=workload, compiler="torch.compile", repro_after="dynamo")
    spec = read_launcher(launcher)
    assert spec.kind == "after_aot" and spec.dynamo_graph and "torch._C._nn.linear" in open(launcher).read()
    proc, done = minify(launcher)
    assert done.signature.exc_type.endswith("IndexError") and done.nodes <= 3 < done.start_nodes
    repro = open(done.repro).read()  # the ATen graph, compiled whole as torch.compile's Inductor backend compiles
    assert "torch.ops.aten.cumsum.default" in repro and "compile_fx(" in repro and "compile_fx_inner" not in repro
    assert "CONSTANT_TENSOR" in program_facts(done.repro[:-3] + ".pt2")["kinds"]
    assert repro_signature(done.repro).matches(done.signature)
    events = events_of(proc)
    assert not events[-1].fallback  # repro_standalone.py, checked by minify as a fresh script
    # raised at lowering: a candidate without the cumsum is stopped where its wrapper module would build kernels
    passed = [e for e in events if e.event == "candidate" and e.verdict == "passes" and not e.cached]
    assert passed and all(e.detail == STOPPED_AT_BUILD for e in passed), [e.detail for e in passed]


def test_a_launcher_traced_with_dynamic_shapes_keeps_the_dims_that_were_symbolic_and_only_those(dumps, tmp_path):
    # torch.compile(dynamic=True): the batch and token dims are symbols in load_args; the weights' are not, though
    # a symbolic make_fx alone (PyTorch's after_aot) would make them dynamic too
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-dynamic-relu-compile_error", compiler="torch.compile")
    assert "tracing_mode='symbolic'" in open(launcher).read()
    _, done = minify(launcher)
    assert done.nodes == 1 and "torch.ops.aten.relu.default" in open(done.repro).read()
    [sizes] = program_facts(done.repro[:-3] + ".pt2")["sizes"]
    assert sizes[-1] == "32" and any(not d.isdigit() for d in sizes), sizes  # the batch or tokens, symbolic
    standalone = done.repro.replace("repro.py", "repro_standalone.py")
    assert "DYNAMIC_SHAPES = ({" in open(standalone).read()
    for script in (done.repro, standalone):
        assert repro_signature(script).matches(done.signature), script
