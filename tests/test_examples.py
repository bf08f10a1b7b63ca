"""The dump tool of minifier/examples: `python -m minifier.examples.dump --serve`, which the tests' dumps go through."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, child_env

pytestmark = pytest.mark.compile


def test_the_dump_server_answers_each_request_as_the_command_would_and_serves_on_after_a_refusal(tmp_path):
    requests = [["--out", str(tmp_path / "a"), "--model", "nope"], ["--out", str(tmp_path / "b")], ["--model", "seed"]]
    proc = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--serve"],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused, made, no_out = map(json.loads, proc.stdout.splitlines())
    assert refused["code"] == 2 and "invalid choice: 'nope'" in refused["stderr"]
    launcher = made["stdout"].strip()
    assert made["code"] == 0 and launcher.startswith(str(tmp_path / "b")) and os.path.isfile(launcher)
    # what the forked compile printed comes back in the reply, never on the replies' channel
    assert "compile failed as intended: InductorError" in made["stderr"]
    assert no_out["code"] == 2 and "--out" in no_out["stderr"]
