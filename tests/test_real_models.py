"""Real HF models (transformers, random weights, small configs) failing for real: PyTorch dumps them,
`aoti-minify` reproduces and minifies them.

BERT with an index_put-built attention mask spliced into its middle layer: torch 2.13's CPU outer-loop
fusion raises `KeyError: 'buf<N>'` while compiling (pytorch/pytorch#188228); nothing is injected.
RoBERTa whose mish (log1p inside) computes wrong numbers, and Llama whose relu kernel throws inside an
OpenMP region and so aborts the process: neither error names a kernel, and each is found by evidence
(the diverging value, the launch that never ended) instead of by search. A tracker bug that raises at run time
(#189189: the proxy executor's complex sub) in torch.nn's smallest MLP.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, aoti_minify, events_of, make_dump, minify, repro_signature

from minifier.contract.events import CheckpointEvent

pytestmark = pytest.mark.compile
WORKLOAD = "hf-bert-index_put_mask-keyerror"


def dump_workload(name: str, out) -> str:
    pytest.importorskip("transformers")
    return make_dump(str(out), workload=name)


def forward_of(repro: str) -> str:
    return open(repro).read().split("def forward", 1)[1].split("return", 1)[0]


def test_real_hf_model_failure_reproduces_with_its_signature(tmp_path):
    pytest.importorskip("transformers")
    dump = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", str(tmp_path), "--workload", WORKLOAD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert dump.returncode == 0, dump.stderr[-4000:]
    assert "InductorError" in dump.stderr  # the user's own compile failed, before any minifier ran
    launcher = dump.stdout.strip().splitlines()[-1]

    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-4000:]
    failure = events_of(run)[-1].failure
    assert failure.signature.exc_type == "KeyError"
    assert re.fullmatch(r"'buf(\d+|<\w+>)'", failure.signature.message), failure.signature.message
    assert failure.nodes > 100  # the whole model, not a toy graph
    # raised while generating the kernel that fuses the mask's index_put into the softmax: placed there
    assert failure.kernel.fused and {"index_put_", "softmax"} <= set(failure.kernel.source_nodes), failure.kernel
    written = json.load(open(os.path.join(os.path.dirname(launcher), "failure.json")))
    assert written["signature"]["exc_type"] == "KeyError" and written["nodes"] == failure.nodes
    assert "index_put" in written["graph"] and "scaled_dot_product_attention" in written["graph"]


def test_an_accuracy_failure_is_localized_by_its_first_diverging_value(tmp_path):
    launcher = dump_workload("hf-roberta-log1p-accuracy", tmp_path)
    proc, done = minify(launcher)
    assert done.start_nodes > 100 and done.nodes == 1 and done.signature.exc_type == "AccuracyError"
    assert re.search(r"accuracy probe: \d+ values diverge, the first at mish", proc.stderr)
    assert "fake kernel" not in proc.stderr  # every value of RoBERTa has the sizes its fake value said
    assert "aten.mish" in forward_of(done.repro)  # mish decomposes to log1p, the injected bug
    won = [e for e in events_of(proc) if isinstance(e, CheckpointEvent)][-1]
    assert won.nodes == 1


def test_a_run_that_dies_in_a_kernel_is_placed_by_its_launch_trace_and_minified(tmp_path):
    launcher = dump_workload("hf-llama-relu-runtime_error", tmp_path)
    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-4000:]
    failure = events_of(run)[-1].failure
    assert failure.signature.describe() == "WorkerCrash: SIGABRT"
    assert failure.kernel.exact and "relu" in failure.kernel.source_nodes  # no error text named it
    proc, done = minify(launcher)
    assert done.nodes == 1 and "aten.relu" in forward_of(done.repro)
    assert "(named by Inductor)" in proc.stderr


def test_a_tracker_bug_raised_at_run_time_shrinks_to_its_op_and_reproduces_alone(dumps, tmp_path):
    """pytorch/pytorch#189189 on the CPU: a complex sub left to the proxy executor packs its arguments wrongly and the
    compiled program raises when it runs ("Mismatch between ints consumed and num_ints"). The error names the
    wrapper's line of the call, not a kernel."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-complex_sub-proxy_executor")
    proc, done = minify(launcher)
    assert done.signature.exc_type == "RuntimeError" and "ints consumed" in done.signature.message, done.signature
    assert done.nodes == 1 and "aten.sub.Tensor" in forward_of(done.repro), forward_of(done.repro)
    assert done.queries <= 20
    # repro_standalone.py was compiled and run by the minifier as a fresh script; repro.py is run here
    assert events_of(proc)[-1].fallback == ""
    assert repro_signature(done.repro).matches(done.signature)
