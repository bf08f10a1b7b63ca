"""DumpLayout: where a dump's files are, and where the outputs go unless the command line says otherwise."""

import os

from minifier.contract.launcher import parse_launcher
from minifier.contract.layout import DumpLayout, checkpoint_nodes


def test_outputs_go_beside_the_launcher_unless_asked_elsewhere(tmp_path):
    minifier = tmp_path / "torch_compile_debug" / "run_1" / "minifier"
    launcher = str(minifier / "minifier_launcher.py")
    beside = DumpLayout.of(launcher)
    assert (beside.failure_json, beside.repro_py, beside.repro_pt2) == tuple(
        str(minifier / name) for name in ("failure.json", "repro.py", "repro.pt2")
    )
    assert beside.checkpoint_py(12) == str(minifier / "checkpoints" / "12.py")
    assert beside.work == str(minifier / "aoti-lens-work") and beside.values.startswith(beside.work)
    assert beside.in_run_folder and beside.run_name == "run_1"
    out = DumpLayout.of(launcher, output_dir=str(tmp_path / "out"))
    assert out.checkpoints == str(tmp_path / "out" / "checkpoints")
    assert out.failure_json == str(tmp_path / "out" / "failure.json")
    assert out.exported_program == str(minifier / "checkpoints" / "exported_program.pt2")  # inputs stay put
    saved = DumpLayout.of(launcher, output_dir=str(tmp_path / "out"), save_dir=str(tmp_path / "cp"))
    assert saved.checkpoints == str(tmp_path / "cp")


def test_a_level_one_repro_is_not_in_a_run_folder_and_never_overwritten(tmp_path):
    layout = DumpLayout.of(str(tmp_path / "repro.py"))
    assert not layout.in_run_folder
    assert layout.root == str(tmp_path / "repro.minified") and layout.repro_py == str(
        tmp_path / "repro.minified" / "repro.py"
    )
    assert str(tmp_path / "repro.py") not in layout.outputs()
    checkpoint = DumpLayout.of(str(tmp_path / "checkpoints" / "3.py"))
    assert checkpoint.checkpoints == str(tmp_path / "checkpoints" / "3.minified" / "checkpoints")


def test_a_moved_dumps_own_save_dir_is_never_a_place_to_write(tmp_path):
    """PyTorch's launcher names its save_dir by absolute path; a dump copied from another machine names a
    folder of that machine, which must not be created here (the CLI and the server share this layout)."""
    minifier = tmp_path / "here" / "torch_compile_debug" / "run_1" / "minifier"
    minifier.mkdir(parents=True)
    text = open(os.path.join(os.path.dirname(__file__), "data", "seed_launcher.py")).read()
    (minifier / "minifier_launcher.py").write_text(text)
    spec = parse_launcher(text, str(minifier / "minifier_launcher.py"), require_pt2=False)
    assert spec.save_dir.startswith("/data/torch_compile_debug/")  # the machine that wrote it
    assert spec.layout().checkpoints == str(minifier / "checkpoints") == DumpLayout.of(spec.path).checkpoints


def test_checkpoints_are_named_by_their_node_count():
    assert [checkpoint_nodes(n) for n in ("12.py", "12.pt2", "exported_program.py")] == [12, None, None]
