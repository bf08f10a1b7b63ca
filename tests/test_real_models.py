"""A real HF model with a real Inductor bug: PyTorch dumps it, `aoti-minify run` reproduces it.

BERT (transformers, random weights) with an index_put-built attention mask spliced into its middle
layer: torch 2.13's CPU outer-loop fusion raises `KeyError: 'buf<N>'` while compiling
(pytorch/pytorch#188228). Nothing here is injected.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, aoti_minify, events_of

pytestmark = pytest.mark.compile
WORKLOAD = "hf-bert-index_put_mask-keyerror"


def test_real_hf_model_failure_reproduces_with_its_signature(tmp_path):
    pytest.importorskip("transformers")
    dump = subprocess.run([sys.executable, "-m", "minifier.examples.dump", "--out", str(tmp_path), "--workload",
                           WORKLOAD], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert dump.returncode == 0, dump.stderr[-4000:]
    assert "InductorError" in dump.stderr  # the user's own compile failed, before any minifier ran
    launcher = dump.stdout.strip().splitlines()[-1]

    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-4000:]
    failure = events_of(run)[-1].failure
    assert failure.signature.exc_type == "KeyError"
    assert re.fullmatch(r"'buf(\d+|<\w+>)'", failure.signature.message), failure.signature.message
    assert failure.nodes > 100  # the whole model, not a toy graph
    written = json.load(open(os.path.join(os.path.dirname(launcher), "failure.json")))
    assert written["signature"]["exc_type"] == "KeyError" and written["nodes"] == failure.nodes
    assert "index_put" in written["graph"] and "scaled_dot_product_attention" in written["graph"]
