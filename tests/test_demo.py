"""The README's main job: `aoti-minify demo` on the bundled failing model."""

import os

import pytest
from conftest import aoti_minify

pytestmark = pytest.mark.compile


@pytest.mark.slow
def test_demo_dumps_reproduces_and_minifies_the_bundled_model(tmp_path):
    proc = aoti_minify("demo", "--dir", str(tmp_path / "demo"), "--device", "cpu", "--workers", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "reproduced: CppCompileError: 'compile' was not declared in this scope" in proc.stdout
    assert "minimized 3 -> 1 nodes" in proc.stdout
    repro = proc.stdout.strip().splitlines()[-1].removeprefix("repro: ")
    assert repro.startswith(str(tmp_path / "demo")) and os.path.isfile(repro)
