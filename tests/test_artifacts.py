import os
import subprocess
import sys

import pytest

from minifier.contract.artifacts import (
    OutputError,
    copy_repro,
    prepare,
    read_repro_graph,
    rebuilt_standalone,
    relocate_dump,
    render_repro,
    render_standalone_fallback,
    weights_of,
    write_repro,
)
from minifier.contract.launcher import ConfigAssignment, LauncherSpec, read_launcher
from minifier.contract.layout import DumpLayout

GRAPH = "def forward(self, linear):\n    relu = torch.ops.aten.relu.default(linear);  linear = None\n    return (relu,)"


def spec(tmp_path) -> LauncherSpec:
    return LauncherSpec(
        path=str(tmp_path / "minifier" / "minifier_launcher.py"),
        pt2="/x.pt2",
        run_repro_line=0,
        config=[ConfigAssignment("torch._inductor.config", "cpp.inject_relu_bug_TESTING_ONLY", "compile_error")],
        config_patches={"aot_inductor.package": True},
        env={"TORCHDYNAMO_REPRO_AFTER": None},
    )


def test_repro_is_plain_torch_python_that_carries_its_graph(tmp_path):
    text = render_repro(spec(tmp_path), "1.pt2", "", GRAPH, ["aoti-lens checkpoint: 1 of 3 graph nodes"], ["my_ops"])
    compile(text, "repro.py", "exec")
    assert "torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'" in text
    assert "os.environ.pop('TORCHDYNAMO_REPRO_AFTER', None)" in text
    assert "import my_ops" in text and "command='run'" in text
    path = tmp_path / "1.py"
    path.write_text(text)
    assert read_repro_graph(str(path)) == GRAPH
    assert read_repro_graph(str(tmp_path / "missing.py")) is None


def test_repro_py_points_at_its_own_program(tmp_path):
    layout = spec(tmp_path).layout(output_dir=str(tmp_path / "out"))
    os.makedirs(layout.checkpoints)
    checkpoint = os.path.join(layout.checkpoints, "1.py")
    (tmp_path / "out" / "checkpoints" / "1.pt2").write_bytes(b"program")
    with open(checkpoint, "w") as f:
        f.write(render_repro(spec(tmp_path), "1.pt2", "", GRAPH, [], []))
    repro = write_repro(layout, checkpoint)
    assert "'repro.pt2'" in open(repro).read() and "'1.pt2'" not in open(repro).read()
    assert (tmp_path / "out" / "repro.pt2").read_bytes() == b"program"


def test_a_repro_that_refers_to_the_originals_weights_finds_them_wherever_it_is_written(tmp_path):
    original = tmp_path / "out" / "checkpoints" / "exported_program.pt2"
    layout = spec(tmp_path).layout(output_dir=str(tmp_path / "out"))
    os.makedirs(layout.checkpoints)
    original.write_bytes(b"the weights")
    checkpoint = os.path.join(layout.checkpoints, "4.py")
    (tmp_path / "out" / "checkpoints" / "4.pt2").write_bytes(b"program")
    with open(checkpoint, "w") as f:
        f.write(render_repro(spec(tmp_path), "4.pt2", "", GRAPH, [], [], weights="exported_program.pt2"))
    assert weights_of(open(checkpoint).read(), checkpoint) == str(original)
    assert read_launcher(checkpoint).weights == str(original)  # minified again, its workers restore them too
    repro = write_repro(layout, checkpoint)
    assert weights_of(open(repro).read(), repro) == str(original)
    copied = copy_repro(layout, str(tmp_path / "elsewhere"))
    assert weights_of(open(copied).read(), copied) == str(tmp_path / "elsewhere" / "exported_program.pt2")
    assert (tmp_path / "elsewhere" / "exported_program.pt2").read_bytes() == b"the weights"
    compile(open(copied).read(), copied, "exec")


def test_relocated_dump_uses_its_own_files(tmp_path):
    run = tmp_path / "a" / "torch_compile_debug" / "run_1"
    (run / "minifier" / "checkpoints").mkdir(parents=True)
    launcher = run / "minifier" / "minifier_launcher.py"
    launcher.write_text(f"exported_program = torch.export.load('{run}/minifier/checkpoints/exported_program.pt2')\n")
    copied = relocate_dump(str(launcher), str(tmp_path / "b"), "run_1.copy")
    assert copied == str(tmp_path / "b" / "torch_compile_debug" / "run_1.copy" / "minifier" / "minifier_launcher.py")
    assert str(tmp_path / "b") in open(copied).read() and str(run) not in open(copied).read()
    (run / "minifier" / "checkpoints" / "exported_program.pt2").write_bytes(b"weights")
    linked = relocate_dump(str(launcher), str(tmp_path / "c"), "run_1.copy", link=True)
    pt2 = os.path.join(os.path.dirname(linked), "checkpoints", "exported_program.pt2")
    assert os.path.samefile(pt2, run / "minifier" / "checkpoints" / "exported_program.pt2")
    assert str(tmp_path / "c") in open(linked).read() and str(run) in launcher.read_text()  # rewritten, not in place


def test_accuracy_is_written_as_pytorch_writes_it(tmp_path):
    for accuracy, written in (
        ("", "accuracy=False,"),
        ("accuracy", "accuracy='accuracy',"),
        ("strict_accuracy", "accuracy='strict_accuracy',"),
    ):
        assert written in render_repro(spec(tmp_path), "1.pt2", accuracy, GRAPH, [], [])


def test_the_standalone_fallback_says_why_and_runs_repro_py(tmp_path):
    (tmp_path / "repro.py").write_text("raise RuntimeError('the same failure')\n")
    (tmp_path / "repro_standalone.py").write_text(render_standalone_fallback("a tensor of 9 GB", ["header"]))
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "repro_standalone.py")],
        capture_output=True,
        text=True,
        cwd=str(tmp_path.parent),
    )
    assert "a tensor of 9 GB; running repro.py instead" in proc.stderr
    assert proc.stderr.rstrip().endswith("RuntimeError: the same failure")
    layout = DumpLayout.of(str(tmp_path / "minifier_launcher.py"))
    assert rebuilt_standalone(layout) is None  # the bug report then shows repro.py, and asks for repro.pt2
    (tmp_path / "repro_standalone.py").write_text("class Repro(torch.nn.Module): ...\n")
    assert rebuilt_standalone(layout) == str(tmp_path / "repro_standalone.py")


def test_refuses_outputs_that_would_overwrite_the_input(tmp_path):
    launcher = tmp_path / "repro.py"
    layout = DumpLayout.of(str(launcher), output_dir=str(tmp_path))
    with pytest.raises(OutputError, match="overwrite the input"):
        prepare(layout, [str(launcher), str(tmp_path / "repro.pt2")])
    prepare(DumpLayout.of(str(launcher)), [str(launcher), str(tmp_path / "repro.pt2")])  # the default: beside it
