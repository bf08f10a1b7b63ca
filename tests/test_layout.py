"""DumpLayout: where a dump's files are, and where the outputs go unless the command line says otherwise."""

from minifier.layout import DumpLayout, checkpoint_nodes


def test_outputs_go_beside_the_launcher_unless_asked_elsewhere(tmp_path):
    minifier = tmp_path / "torch_compile_debug" / "run_1" / "minifier"
    launcher = str(minifier / "minifier_launcher.py")
    beside = DumpLayout.of(launcher)
    assert (beside.failure_json, beside.repro_py, beside.repro_pt2) == tuple(
        str(minifier / name) for name in ("failure.json", "repro.py", "repro.pt2"))
    assert beside.checkpoint_py(12) == str(minifier / "checkpoints" / "12.py")
    assert beside.work == str(minifier / "aoti-lens-work") and beside.values.startswith(beside.work)
    assert beside.in_run_folder and beside.run_name == "run_1"
    # PyTorch's launcher names its own save_dir; it is followed unless --output-dir or --save-dir say otherwise.
    hint = str(tmp_path / "old" / "checkpoints")
    assert DumpLayout.of(launcher, save_dir_hint=hint).checkpoints == hint
    out = DumpLayout.of(launcher, output_dir=str(tmp_path / "out"), save_dir_hint=hint)
    assert out.checkpoints == str(tmp_path / "out" / "checkpoints")
    assert out.failure_json == str(tmp_path / "out" / "failure.json")
    assert out.exported_program == str(minifier / "checkpoints" / "exported_program.pt2")  # inputs stay put
    saved = DumpLayout.of(launcher, output_dir=str(tmp_path / "out"), save_dir=str(tmp_path / "cp"))
    assert saved.checkpoints == str(tmp_path / "cp")


def test_a_level_one_repro_is_not_in_a_run_folder(tmp_path):
    assert not DumpLayout.of(str(tmp_path / "repro.py")).in_run_folder


def test_checkpoints_are_named_by_their_node_count():
    assert [checkpoint_nodes(n) for n in ("12.py", "12.pt2", "exported_program.py")] == [12, None, None]
