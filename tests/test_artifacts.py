import os

from minifier.artifacts import read_repro_graph, relocate_dump, render_repro, write_repro
from minifier.launcher import ConfigAssignment, LauncherSpec

GRAPH = "def forward(self, linear):\n    relu = torch.ops.aten.relu.default(linear);  linear = None\n    return (relu,)"


def spec(tmp_path) -> LauncherSpec:
    return LauncherSpec(path=str(tmp_path / "minifier" / "minifier_launcher.py"), pt2="/x.pt2", run_repro_line=0,
                        config=[ConfigAssignment("torch._inductor.config", "cpp.inject_relu_bug_TESTING_ONLY",
                                                 "compile_error")],
                        config_patches={"aot_inductor.package": True}, env={"TORCHDYNAMO_REPRO_AFTER": None})


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


def test_relocated_dump_uses_its_own_files(tmp_path):
    run = tmp_path / "a" / "torch_compile_debug" / "run_1"
    (run / "minifier" / "checkpoints").mkdir(parents=True)
    launcher = run / "minifier" / "minifier_launcher.py"
    launcher.write_text(f"exported_program = torch.export.load('{run}/minifier/checkpoints/exported_program.pt2')\n")
    copied = relocate_dump(str(launcher), str(tmp_path / "b"), "run_1.copy")
    assert copied == str(tmp_path / "b" / "torch_compile_debug" / "run_1.copy" / "minifier" / "minifier_launcher.py")
    assert str(tmp_path / "b") in open(copied).read() and str(run) not in open(copied).read()
