"""report.md is pasted into public issues: this machine's folders become placeholders (torch-free)."""

from __future__ import annotations

import os
import sys

from minifier.contract.launcher import read_launcher
from minifier.contract.layout import DumpLayout
from minifier.driver.report import machine_folders, with_placeholders

FOLDERS = sorted(
    [
        ("/tmp/torchinductor_ann", "<inductor cache>"),
        ("/home/ann/ws/.venv", "<python env>"),
        ("/home/ann/ws", "<workspace>"),
        ("/home/ann", "~"),
    ],
    key=lambda pair: len(pair[0]),
    reverse=True,
)


def test_each_folder_becomes_its_placeholder_the_innermost_first_and_only_whole():
    text = (
        "/tmp/torchinductor_ann/cd/ckt.kernel.cpp:15:33: error: 'compile' was not declared\n"
        "Python: /home/ann/ws/.venv/bin/python (`/home/ann/ws/torch_compile_debug/run_1`)\n"
        "/home/anna/notes /home/ann/.cache C:\\\\not\\\\a\\\\path /home/ann"
    )
    assert with_placeholders(text, FOLDERS) == (
        "<inductor cache>/cd/ckt.kernel.cpp:15:33: error: 'compile' was not declared\n"
        "Python: <python env>/bin/python (`<workspace>/torch_compile_debug/run_1`)\n"
        "/home/anna/notes ~/.cache C:\\\\not\\\\a\\\\path ~"
    )


def test_the_folders_are_the_launchers_cache_this_python_the_workspace_and_home(tmp_path):
    launcher = os.path.join(os.path.dirname(__file__), "data", "seed_launcher.py")
    spec = read_launcher(launcher, require_pt2=False)
    ws = tmp_path / "ws"
    layout = DumpLayout.of(str(ws / "torch_compile_debug" / "run_1" / "minifier" / "minifier_launcher.py"))
    folders = dict(machine_folders(spec, layout))
    assert folders[spec.env["TORCHINDUCTOR_CACHE_DIR"]] == "<inductor cache>"  # the launcher's own cache
    assert folders[sys.prefix] == "<python env>" and folders[str(ws)] == "<workspace>"
    lengths = [len(folder) for folder in folders]
    assert lengths == sorted(lengths, reverse=True)
