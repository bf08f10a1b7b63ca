import os
import shutil

import pytest

from minifier.contract.launcher import (
    BadLauncher,
    find_launcher,
    parse_launcher,
    read_launcher,
    runnable_original,
    symbolic_inputs,
)

DATA = os.path.join(os.path.dirname(__file__), "data", "seed_launcher.py")
AFTER_AOT = os.path.join(os.path.dirname(__file__), "data", "after_aot_launcher.py")


@pytest.fixture
def launcher_dir(tmp_path):
    """The real seed launcher in its usual layout, with an (empty) exported program beside it."""
    minifier = tmp_path / "torch_compile_debug" / "run_1" / "minifier"
    (minifier / "checkpoints").mkdir(parents=True)
    (minifier / "checkpoints" / "exported_program.pt2").write_bytes(b"")
    shutil.copyfile(DATA, minifier / "minifier_launcher.py")
    return minifier


def test_reads_pytorchs_launcher_without_running_it(launcher_dir):
    spec = read_launcher(str(launcher_dir / "minifier_launcher.py"))
    lines = open(DATA).read().splitlines()
    assert "run_repro(" in lines[spec.run_repro_line]
    assert spec.command == "minify" and spec.accuracy == "" and spec.check_str is None
    assert spec.pt2 == str(launcher_dir / "checkpoints" / "exported_program.pt2")  # moved dump: found beside it
    assert spec.config_patches == {"aot_inductor.package": True}
    assert spec.env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/torchinductor_root"
    assert spec.env["TORCHDYNAMO_REPRO_AFTER"] is None
    assert spec.torch_version == "2.13.0+cpu"
    inject = [a for a in spec.config if a.attr == "cpp.inject_relu_bug_TESTING_ONLY"]
    assert inject and inject[0].module == "torch._inductor.config" and inject[0].value == "compile_error"
    assert spec.run_dir == str(launcher_dir.parent)


def test_reads_torch_compiles_launcher_and_names_where_its_graph_is_saved(tmp_path):
    path = str(tmp_path / "minifier_launcher.py")
    text = open(AFTER_AOT).read()
    spec = parse_launcher(text, path)
    assert spec.kind == "after_aot" and spec.traced and spec.accuracy == ""
    assert spec.pt2.startswith(str(tmp_path / "aoti-lens-work" / "after_aot-")) and not os.path.exists(spec.pt2)
    assert spec.torch_version == "2.13.0+cpu" and spec.env["TORCHDYNAMO_REPRO_AFTER"] is None
    assert ("torch._inductor.config", "cpp.inject_relu_bug_TESTING_ONLY", "compile_error") in [
        (a.module, a.attr, a.value) for a in spec.config
    ]
    edited = text.replace("accuracy=False", "accuracy=True")
    assert parse_launcher(edited, path).accuracy == "accuracy"
    assert parse_launcher(edited, path).pt2 != spec.pt2  # another graph, saved apart
    assert parse_launcher(text.replace("tracing_mode='real'", "tracing_mode='symbolic'"), path).traced
    with pytest.raises(BadLauncher, match="tracing_mode='fake', which aoti-lens does not read"):
        parse_launcher(text.replace("tracing_mode='real'", "tracing_mode='fake'"), path)


def test_accepts_run_and_minifier_folders(launcher_dir):
    expected = str(launcher_dir / "minifier_launcher.py")
    assert find_launcher(str(launcher_dir)) == expected
    assert find_launcher(str(launcher_dir.parent)) == expected


def test_missing_program_is_a_clear_error(launcher_dir):
    os.remove(launcher_dir / "checkpoints" / "exported_program.pt2")
    with pytest.raises(BadLauncher, match="exported program is missing"):
        read_launcher(str(launcher_dir / "minifier_launcher.py"))
    spec = read_launcher(str(launcher_dir / "minifier_launcher.py"), require_pt2=False)
    assert spec.pt2.endswith("exported_program.pt2")


@pytest.mark.parametrize(
    "text, message",
    [
        ("import torch\nprint('hello')\n", "not a PyTorch minifier launcher"),
        ("def broken(:\n", "not valid Python"),
        (
            "from torch._dynamo.repro.after_aot import run_repro\nrun_repro(mod, load_args)\n",
            "without Repro or load_args",
        ),
        (
            "from torch._dynamo.repro.after_dynamo import run_repro\nclass Repro: pass\ndef load_args(reader): pass\n"
            "run_repro(mod, load_args, backend='aot_eager')\n",
            "backend='aot_eager'; aoti-lens minifies Inductor's failures",
        ),
        ("from torch._dynamo.repro.after_inductor import run_repro\nrun_repro(mod)\n", "does not read"),
        ("from torch._dynamo.repro.aoti import run_repro\nrun_repro(ep, command='minify')\n", "no `exported_program"),
        (
            "from torch._dynamo.repro.aoti import run_repro\nexported_program = torch.export.load('x.pt2')\n"
            "run_repro(exported_program, command='explode')\n",
            "neither 'minify' nor 'run'",
        ),
    ],
)
def test_foreign_or_broken_files_are_rejected(tmp_path, text, message):
    with pytest.raises(BadLauncher, match=message):
        parse_launcher(text, str(tmp_path / "minifier_launcher.py"), require_pt2=False)


def test_level_one_repro_and_accuracy_launchers(tmp_path):
    text = open(DATA).read().replace("accuracy=False, command='minify'", "accuracy=True, command='run'")
    spec = parse_launcher(text, str(tmp_path / "repro.py"), require_pt2=False)
    assert spec.command == "run" and spec.accuracy == "accuracy" and spec.run_dir is None


def test_non_literal_config_values_are_skipped_not_executed(tmp_path):
    text = (
        open(DATA)
        .read()
        .replace(
            "torch._dynamo.config.allow_rnn = False",
            "torch._dynamo.config.allow_rnn = __import__('os').system('touch pwned')",
        )
    )
    spec = parse_launcher(text, str(tmp_path / "minifier_launcher.py"), require_pt2=False)
    assert any("allow_rnn" in s for s in spec.skipped)
    assert not any(a.attr == "allow_rnn" for a in spec.config)
    assert not os.path.exists("pwned")


def test_portable_settings_leave_out_the_machine_and_the_dump_switches(tmp_path):
    text = (
        open(DATA)
        .read()
        .replace(
            "import os\n",
            "import os\nos.environ['TORCHINDUCTOR_MAX_AUTOTUNE'] = '1'\nos.environ['AOTINDUCTOR_REPRO_LEVEL'] = '3'\n"
            "os.environ['TRITON_CACHE_DIR'] = '/home/someone/.triton'\n",
            1,
        )
        .replace(
            "torch._inductor.config.cpp_wrapper = False\n",
            "torch._inductor.config.cpp_wrapper = False\ntorch._inductor.config.cpp.cxx = (None, '/opt/gcc/bin/g++')\n",
        )
    )
    spec = parse_launcher(text, str(tmp_path / "minifier_launcher.py"), require_pt2=False)
    portable = spec.portable()
    assert portable.env["TORCHINDUCTOR_MAX_AUTOTUNE"] == "1"  # changes behaviour anywhere: kept
    assert "TORCHINDUCTOR_CACHE_DIR" not in portable.env and "TRITON_CACHE_DIR" not in portable.env
    assert portable.env["AOTINDUCTOR_REPRO_LEVEL"] is None and portable.env["DUMP_AOTI_MINIFIER"] is None
    assert not any(a.attr == "cpp.cxx" for a in portable.config) and any(
        a.attr == "cpp_wrapper" for a in portable.config
    )
    assert sorted(spec.machine_settings) == [
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "torch._inductor.config.cpp.cxx",
    ]


def test_our_own_repro_files_are_launchers_that_find_their_program(tmp_path):
    from minifier.contract.artifacts import render_repro

    spec = parse_launcher(open(DATA).read(), str(tmp_path / "minifier_launcher.py"), require_pt2=False)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "3.pt2").write_bytes(b"")
    (tmp_path / "checkpoints" / "exported_program.pt2").write_bytes(b"")  # PyTorch's, beside it: not ours
    checkpoint = tmp_path / "checkpoints" / "3.py"
    checkpoint.write_text(render_repro(spec, "3.pt2", "", "def forward(self, x):\n    return (x,)", [], []))
    again = read_launcher(str(checkpoint))
    assert again.command == "run" and again.pt2 == str(tmp_path / "checkpoints" / "3.pt2")
    assert again.layout().root == str(tmp_path / "checkpoints" / "3.minified")


def test_the_original_is_made_runnable_from_any_folder_with_its_program_where_it_is_now(launcher_dir):
    spec = read_launcher(str(launcher_dir / "minifier_launcher.py"))
    text = runnable_original(spec)
    compile(text, "original.py", "exec")
    calls = [line.strip() for line in text.splitlines() if line.strip().startswith("run_repro(")]
    assert len(calls) == 1 and "command='run'" in calls[0] and "command='minify'" not in text
    assert f"exported_program = torch.export.load({spec.pt2!r})" in text.splitlines()
    assert text.count("\n") == open(DATA).read().count("\n")  # each edit stays on its lines
    rerun = parse_launcher(text, str(launcher_dir / "original.py"), require_pt2=False)
    assert rerun.command == "run" and rerun.pt2 == spec.pt2


def test_a_torch_compile_original_reads_its_saved_inputs_where_they_are_now(tmp_path):
    minifier = tmp_path / "torch_compile_debug" / "run_1" / "minifier"
    (minifier / "checkpoints" / "storages").mkdir(parents=True)
    shutil.copyfile(AFTER_AOT, minifier / "minifier_launcher.py")
    text = runnable_original(read_launcher(str(minifier / "minifier_launcher.py")))
    [call] = [line for line in text.splitlines() if line.strip().startswith("run_repro(")]
    assert f"save_dir={str(minifier / 'checkpoints')!r}" in call and "command='run'" in call


def test_the_dims_a_dynamic_launcher_writes_as_symbols_are_its_dynamic_ones_and_only_those(tmp_path):
    path = tmp_path / "minifier_launcher.py"
    path.write_text(
        "s77 = 4\ndef load_args(reader):\n"
        "    buf0 = reader.storage(None, 256)\n    reader.tensor(buf0, (8, 8), is_leaf=True)  # arg0_1\n"
        "    reader.symint(4, expr='s77')  # arg1_1\n    reader.symint(3)  # arg2_1\n"
        "    buf1 = reader.storage(None, 32*s77)\n    reader.tensor(buf1, (s77, 8), is_leaf=True)  # arg3_1\n"
        "    reader.const('c')  # arg4_1\n"
    )
    assert symbolic_inputs(str(path), 5) == [(), True, False, (0,), False]
    with pytest.raises(ValueError, match="load_args reads 6 inputs"):
        symbolic_inputs(str(path), 6)
