"""`aoti-minify triage` on real failures, real AOTI compiles on CPU (g++): a real Inductor bug a config avoids
(the workaround verified on the original), Inductor's injected relu bug (its lowering named), and a real bug no
config avoids (no false claim)."""

from __future__ import annotations

import linecache
import os

import pytest
from conftest import aoti_minify, events_of

from minifier.contract.events import CandidateEvent, TriageEvent, TrialEvent, load_failure, load_triage
from minifier.contract.layout import DumpLayout
from minifier.examples import custom_ops

pytestmark = pytest.mark.compile
OP = "aoti_lens_examples.pool_tokens.default"


def triaged(launcher: str, *extra: str, env: dict[str, str] | None = None) -> tuple[list, TriageEvent]:
    proc = aoti_minify("triage", launcher, "--events", "--workers", "2", *extra, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    events = events_of(proc)
    assert isinstance(events[-1], TriageEvent), events[-1]
    assert load_triage(events[-1].path) == events[-1].triage  # triage.json says what the event said
    return events, events[-1]


def verified(events: list, configs: dict) -> bool:
    return any(
        isinstance(e, TrialEvent) and e.on == "original" and e.inductor_configs == configs and e.verdict == "fixes"
        for e in events
    )


def test_a_real_inductor_bug_gets_a_workaround_verified_on_the_original(dumps, tmp_path):
    """torch 2.13's CPU codegen KeyError on an index_put-built mask fused into softmax (#188228, #196570):
    minified first (no repro.py yet), then config changes tried on the minimal graph; what is listed made
    the original compile, run and match eager."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-index_put_mask-keyerror")
    events, done = triaged(launcher)
    triage = done.triage
    assert triage.signature.exc_type == "KeyError"
    assert os.path.dirname(triage.repro) == os.path.dirname(done.path)
    assert triage.workarounds, triage
    for workaround in triage.workarounds:
        assert workaround.verified_on == "original" and verified(events, workaround.inductor_configs)
        assert workaround.max_abs_error is not None and workaround.max_abs_error < 1e-4
    assert "aten.index_put_.default" in triage.culprit.ops and triage.culprit.phase == "codegen"
    assert triage.deterministic and triage.runs == triage.failures == 2
    # report.md ships the workaround as the exact call
    proc = aoti_minify("report", launcher, "--no-versions")
    assert proc.returncode == 0, proc.stderr
    report = open(os.path.join(os.path.dirname(done.path), "report.md")).read()
    first = triage.workarounds[0]
    call = "aoti_compile_and_package(ep)" if first.code else f"inductor_configs={first.inductor_configs!r})"
    assert f"{first.code}\ntorch._inductor.{call}" in report if first.code else call in report
    assert "### Culprit" in report


def test_a_debug_switch_of_the_users_that_meets_a_bug_is_reverted_and_no_kernel_is_blamed(dumps, tmp_path):
    """triton.debug_sync_graph writes its Python sync line (`pass` on a CPU) into AOTI's C++ wrapper
    (pytorch/pytorch#140219): the error is in the wrapper's own code, no kernel's; the user's switch back at its
    default is the workaround, verified on the original."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-debug_sync-cpp_compile_error")
    run = aoti_minify("run", launcher, "--events")
    assert run.returncode == 0, run.stderr[-4000:]
    failure = events_of(run)[-1].failure
    assert failure.signature.exc_type == "CppCompileError" and "pass" in failure.signature.message
    assert failure.kernel.name is None and failure.kernel.file.endswith(".wrapper.cpp")
    events, done = triaged(launcher)
    triage = done.triage
    first = triage.workarounds[0]
    assert first.inductor_configs == {"triton.debug_sync_graph": False} and first.verified_on == "original"
    assert verified(events, first.inductor_configs)
    assert triage.culprit.subsystem.startswith("a setting of yours")


@pytest.mark.slow
def test_leaving_only_the_culprit_op_to_aten_is_offered_as_code_verified_on_the_original(dumps, tmp_path):
    """Inductor's `any` of uint8 returns bool (pytorch/pytorch#198081): every op left to ATen
    (fallback_by_default) is the only config that fixes the minimal graph; `any` alone left to ATen, registered
    as the user would before compiling, fixes the original too, in a CI job as well (CI set: make_fallback
    raises there for an op with a decomposition unless told not to warn)."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-uint8_any-accuracy")
    events, done = triaged(launcher, "--runs", "1", env={**os.environ, "CI": "1"})
    triage = done.triage
    assert triage.culprit.subsystem == "lowering of aten.any.dim"
    assert triage.workarounds, [e for e in events if isinstance(e, TrialEvent)]
    first = triage.workarounds[0]
    assert first.family == "ATen fallback" and first.inductor_configs == {}
    assert "make_fallback(torch.ops.aten.any.dim, warn=False)" in first.code
    assert any(
        isinstance(e, TrialEvent) and e.on == "original" and e.fallback == "aten.any.dim" and e.verdict == "fixes"
        for e in events
    )


def test_the_injected_relu_bug_names_relus_lowering(dumps, tmp_path):
    launcher = dumps.get(str(tmp_path), model="seed", bug="compile_error", minified=True)
    # more to verify than the two workarounds there are: no trial is dropped, so each one's verdict is seen
    events, done = triaged(launcher, "--runs", "1", "--verify", "3")
    assert not any(isinstance(e, CandidateEvent) for e in events)  # its repro.py is triaged, not minified again
    culprit = done.triage.culprit
    assert culprit.ops == ["aten.relu.default"]
    assert (culprit.phase, culprit.subsystem) == ("C++ compile", "lowering of aten.relu.default")
    # one kernel: a fusion limit leaves Inductor's code as the failing compile's, which is not compiled again
    trials = {next(iter(e.inductor_configs), ""): e for e in events if isinstance(e, TrialEvent) and e.on == "minimal"}
    assert trials["max_fusion_size"].verdict == "fails" and "not compiled again" in trials["max_fusion_size"].detail
    # other code is compiled: relu left to ATen, the first trial
    assert trials[""].verdict == "fixes" and "not compiled again" not in trials[""].detail
    for workaround in done.triage.workarounds:  # whatever is listed, the original passed with it
        assert verified(events, workaround.inductor_configs)


def test_a_bug_no_config_avoids_is_reported_as_none_found(dumps, tmp_path):
    """A complex tensor minus a complex Python scalar: an AssertionError in Inductor no switch avoids."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-complex_scalar-assertion")
    events, done = triaged(launcher, "--runs", "1")
    assert done.triage.workarounds == [] and done.triage.tried > 10
    assert not any(isinstance(e, TrialEvent) and e.verdict == "fixes" for e in events)
    assert done.triage.culprit.subsystem == "unknown"


def test_a_lying_fake_kernel_is_the_culprit_and_no_config_is_offered(dumps, tmp_path):
    """A custom op whose register_fake gives other sizes than the op returns (under dynamic shapes): compiled
    code trusts the fake kernel, so no Inductor config can be the fix; triage names the op and its lie."""
    launcher = dumps.get(str(tmp_path), workload="nn-mlp-dynamic_fake-accuracy")
    options = ("--accuracy", "--import", "minifier.examples.custom_ops")
    # named at `run` time already, with the line that registers the fake kernel (the editor's diagnostic there)
    proc = aoti_minify("run", launcher, "--events", *options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [lie] = load_failure(DumpLayout.of(launcher).failure_json).fake_kernels
    assert (lie.op, lie.fake, lie.real) == (OP, "float32[2, 20, 32]", "float32[2, 16, 32]")
    assert lie.file == custom_ops.__file__
    assert linecache.getline(lie.file, lie.line).startswith("@pool_tokens.register_fake")
    assert "its fake kernel gives float32[2, 20, 32], the op returns float32[2, 16, 32]" in proc.stderr
    events, done = triaged(launcher, *options, "--runs", "1")
    culprit = done.triage.culprit
    assert culprit.subsystem == f"fake kernel of {OP}"
    assert "fake kernel gives float32[2, 20, 32], the op returns float32[2, 16, 32]" in culprit.detail
    assert done.triage.tried == 0 and done.triage.workarounds == []
    assert not [e for e in events if isinstance(e, TrialEvent)]  # no config tried; the run above was the one run


def test_the_code_fingerprint_counts_the_build_configs_and_not_the_codegen_ones():
    """A trial is skipped when its code and build are the failing compile's: a config the C++ build reads
    (its flags) makes another fingerprint, one that only shapes code that came out the same does not."""
    import torch._inductor.config as inductor_config

    from minifier.processes.switches import fingerprint

    code = ("void kernel() {}", "", None, "cpu")
    with inductor_config.patch({"cpp.max_horizontal_fusion_size": 1, "max_fusion_size": 1}):
        codegen_only = fingerprint(*code)
    assert codegen_only == fingerprint(*code)
    with inductor_config.patch({"cpp.enable_unsafe_math_opt_flag": True}):
        assert fingerprint(*code) != codegen_only
    with inductor_config.patch({"aot_inductor.compile_wrapper_opt_level": "O2"}):
        assert fingerprint(*code) != codegen_only
    assert fingerprint("void kernel() { }", *code[1:]) != codegen_only
