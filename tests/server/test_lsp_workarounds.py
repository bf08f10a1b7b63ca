"""A verified workaround where the user compiles: the `aoti.triage` job, the diagnostic on each
aoti_compile_and_package call, the quick fix's edit (tested as JSON, as VS Code gets it), the hover; and the
edit itself on the shapes a call takes."""

from __future__ import annotations

import os
from dataclasses import replace

from lsp_helpers import FAKE_RUN_REPRO_LINE, converter, fake_dump, fake_python, lsp_session, until, uri, write
from lsprotocol import types

from minifier.contract import wire
from minifier.contract.calls import AOTI, TORCH_COMPILE
from minifier.contract.events import (
    Culprit,
    FakeMismatch,
    Signature,
    Triage,
    TriageEvent,
    TrialEvent,
    VersionsEvent,
    Workaround,
    load_failure,
)
from minifier.contract.layout import DumpLayout
from minifier.driver.workarounds import fallback_code
from server.workarounds import compile_calls, workaround_edit

CONFIGS = {"pick_loop_orders": False}
FALLBACK = fallback_code("aten.any.dim")
LOOP_ORDER = Workaround(CONFIGS, "loop order", 5.2, 1.2e-07)


def applied(text: str, line: int, configs=CONFIGS, code: str = "", kind: str = "aoti") -> str | None:
    edit = workaround_edit(text, line, {"inductorConfigs": configs, "code": code, "kind": kind})
    if edit is None:
        return None
    lines = text.splitlines(keepends=True)
    start = sum(map(len, lines[: edit.range.start.line])) + edit.range.start.character
    end = sum(map(len, lines[: edit.range.end.line])) + edit.range.end.character
    return text[:start] + edit.new_text + text[end:]


def test_the_edit_adds_the_keyword_or_merges_into_what_the_call_passes():
    assert applied("p = aoti_compile_and_package(ep)\n", 0) == (
        "p = aoti_compile_and_package(ep, inductor_configs={'pick_loop_orders': False})\n"
    )
    multi = "p = torch._inductor.aoti_compile_and_package(\n    ep,\n    package_path=f('a)'),\n)\n"
    assert applied(multi, 0) == (
        "p = torch._inductor.aoti_compile_and_package(\n    ep,\n    package_path=f('a)'),\n"
        "    inductor_configs={'pick_loop_orders': False},\n)\n"
    )
    assert applied("aoti_compile_and_package(ep, inductor_configs={'max_autotune': True})", 0) == (
        "aoti_compile_and_package(ep, inductor_configs={'pick_loop_orders': False, 'max_autotune': True})"
    )
    assert applied("aoti_compile_and_package(ep, inductor_configs=opts)", 0) == (
        "aoti_compile_and_package(ep, inductor_configs={**opts, 'pick_loop_orders': False})"
    )
    assert applied("aoti_compile_and_package(ep, inductor_configs={'pick_loop_orders': False})", 0) is None
    assert applied("aoti_compile_and_package(ep,", 0) is None  # not whole: no edit
    calls = "# aoti_compile_and_package(ep)\ndef aoti_compile_and_package(x):\n  aoti_compile_and_package(x)\n"
    assert compile_calls(calls, AOTI) == [2]


def test_a_torch_compile_failure_s_workaround_goes_into_torch_compile_s_options():
    assert applied("fast = torch.compile(model)\n", 0, kind="after_aot") == (
        "fast = torch.compile(model, options={'pick_loop_orders': False})\n"
    )
    assert applied(
        "f = torch.compile(model, mode='max-autotune', options={'trace.enabled': True})", 0, kind="after_aot"
    ) == ("f = torch.compile(model, mode='max-autotune', options={'pick_loop_orders': False, 'trace.enabled': True})")
    both = "ep_pkg = aoti_compile_and_package(ep)\nfast = torch.compile(model)\n"
    assert compile_calls(both, TORCH_COMPILE) == [1] and compile_calls(both, AOTI) == [0]
    assert applied(both, 0, kind="after_aot") is None  # an AOTI call is not where a torch.compile workaround goes


def test_a_workaround_that_is_code_goes_above_the_call_once():
    text = "def export(m):\n    pkg = aoti_compile_and_package(ep)\n    return pkg\n"
    fixed = applied(text, 1, {}, FALLBACK)
    assert fixed == (
        "def export(m):\n    from torch._inductor.lowering import make_fallback\n"
        f"    {FALLBACK.splitlines()[1]}\n"
        "    pkg = aoti_compile_and_package(ep)\n    return pkg\n"
    )
    assert applied(fixed, 3, {}, FALLBACK) is None  # the file registers it already


def triage_event(launcher: str, workaround: Workaround = LOOP_ORDER) -> TriageEvent:
    folder = os.path.dirname(launcher)
    triage = Triage(
        signature=Signature("KeyError", "'buf<n>'", "compile_error"),
        workarounds=[workaround],
        tried=18,
        culprit=Culprit(["aten.index_put_.default"], "codegen", "loop order (pick_loop_orders=False avoids it)", ""),
        deterministic=True,
        runs=2,
        failures=2,
        repro=os.path.join(folder, "repro.py"),
    )
    return TriageEvent(path=os.path.join(folder, "triage.json"), triage=triage)


async def test_a_verified_workaround_becomes_a_quick_fix_on_the_users_compile_call(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    model = write(
        os.path.join(ws, "train.py"),
        "import torch\nep = torch.export.export(m, (x,))\n"
        "path = torch._inductor.aoti_compile_and_package(ep, package_path='m.pt2')\n",
    )
    event = triage_event(launcher)
    json_text = wire.dumps(event.triage)
    python = fake_python(
        str(tmp_path / "python"),
        [TrialEvent(CONFIGS, "minimal", "fixes", 5.0), event],
        before=f"cat > {event.path} <<'JSON'\n{json_text}\nJSON",
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python, "keepWarm": 0}) as client:
        diagnostics = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        failure_id = client.item(launcher)["id"]
        titles = [a.title for a in await client.code_actions(uri(launcher), list(diagnostics))]
        assert "Find a workaround" in titles
        await client.command("aoti.triage", failure_id)
        found = await until(lambda: client.diagnostics.get(uri(model)), "the workaround diagnostic on train.py")
        [diagnostic] = found
        assert diagnostic.range.start.line == 2 and diagnostic.severity == types.DiagnosticSeverity.Information
        assert "inductor_configs={'pick_loop_orders': False}" in diagnostic.message
        actions = await client.code_actions(uri(model), [diagnostic])
        [fix] = [converter().unstructure(a) for a in actions if "workaround" in a.title]
        assert fix["kind"] == "quickfix" and "command" not in fix
        [edit] = fix["edit"]["changes"][uri(model)]
        assert edit["newText"] == ", inductor_configs={'pick_loop_orders': False}"
        assert edit["range"]["start"] == {"line": 2, "character": 72}
        # the user takes the fix (the editor applies the edit) and saves: the call passes them, the diagnostic goes
        fixed = applied(open(model).read(), 2)
        assert fixed is not None and "inductor_configs={'pick_loop_orders': False}" in fixed
        write(model, fixed)
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri(model))))
        await until(lambda: len(client.diagnostics[uri(model)]) == 0, "the diagnostic to go once the call passes them")
        hover = await client.hover(uri(launcher), FAKE_RUN_REPRO_LINE)
        assert hover is not None and "pick_loop_orders" in hover.contents.value
        assert "loop order" in hover.contents.value


async def test_a_workaround_that_is_code_is_offered_above_the_users_compile_call(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    model = write(os.path.join(ws, "train.py"), "import torch\npath = torch._inductor.aoti_compile_and_package(ep)\n")
    event = triage_event(launcher, Workaround({}, "ATen fallback", 6.0, 6e-08, code=FALLBACK))
    python = fake_python(
        str(tmp_path / "python"),
        [event],
        before=f"cat > {event.path} <<'JSON'\n{wire.dumps(event.triage)}\nJSON",
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python, "keepWarm": 0}) as client:
        await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        await client.command("aoti.triage", client.item(launcher)["id"])
        [diagnostic] = await until(lambda: client.diagnostics.get(uri(model)), "the workaround diagnostic")
        assert "with make_fallback(torch.ops.aten.any.dim, warn=False) run before it" in diagnostic.message
        actions = await client.code_actions(uri(model), [diagnostic])
        [fix] = [converter().unstructure(a) for a in actions if "workaround" in a.title]
        assert fix["title"] == "Compile with the verified workaround: make_fallback(torch.ops.aten.any.dim, warn=False)"
        [edit] = fix["edit"]["changes"][uri(model)]
        assert edit["newText"] == FALLBACK + "\n" and edit["range"]["start"] == {"line": 1, "character": 0}
        write(model, applied(open(model).read(), 1, {}, FALLBACK))
        client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri(model))))
        await until(lambda: len(client.diagnostics[uri(model)]) == 0, "the diagnostic to go once the file has it")


async def test_a_lying_fake_kernel_found_at_run_time_gets_a_diagnostic_where_it_is_defined(tmp_path):
    """failure.json names a custom op whose fake kernel lies (`aoti-minify run` checks every custom op against an
    eager run): the warning goes on its definition, when that file is in the workspace, before any minify."""
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    source = "import torch\n\n\n@pool.register_fake\ndef _(x):\n    return x\n"
    ops, outside = write(os.path.join(ws, "ops.py"), source), write(str(tmp_path / "lib" / "ops.py"), source)
    failure = load_failure(DumpLayout.of(launcher).failure_json)
    lies = [FakeMismatch("pool", "ns.pool.default", "float32[2, 20]", "float32[2, 16]", f, 4) for f in (ops, outside)]
    write(DumpLayout.of(launcher).failure_json, wire.dumps(replace(failure, fake_kernels=lies)))
    async with lsp_session(ws, settings={"keepWarm": 0}) as client:  # untrusted: nothing runs, failure.json is read
        [diagnostic] = await until(lambda: client.diagnostics.get(uri(ops)), "the diagnostic on the fake kernel")
        assert diagnostic.range.start.line == 3 and diagnostic.severity == types.DiagnosticSeverity.Warning
        assert diagnostic.code == "fake_kernel" and diagnostic.message.startswith(
            "the fake kernel of ns.pool.default gives float32[2, 20], the op returns float32[2, 16] (node pool)"
        )
        assert diagnostic.related_information[0].location.uri == uri(launcher)
        assert uri(outside) not in client.diagnostics  # not the user's file to fix here


async def test_checking_other_torch_releases_puts_their_answer_on_the_repro(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    folder = os.path.dirname(launcher)
    repro = write(os.path.join(folder, "repro.py"), "# aoti-lens checkpoint: 1 of 5 graph nodes\nimport torch\n")
    releases = "reproduces on 2.11.0, 2.15.0; passes on 2.10.0; first bad 2.11.0, last good 2.10.0"
    record = tmp_path / "argv"
    python = fake_python(
        str(tmp_path / "python"),
        [VersionsEvent(path=os.path.join(folder, "versions.json"), releases=releases)],
        before=f'echo "$@" > {record}',
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python, "keepWarm": 0}) as client:
        diagnostics = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        titles = [a.title for a in await client.code_actions(uri(launcher), list(diagnostics))]
        assert "Check other torch releases" in titles
        await client.command("aoti.versions", client.item(launcher)["id"])
        [on_repro] = await until(
            lambda: [d for d in client.diagnostics.get(uri(repro), []) if "torch releases" in d.message],
            "the releases on repro.py's diagnostic",
        )
        assert on_repro.message.endswith(f"; torch releases: {releases}")
        assert any(releases in m.message for m in client.messages)
    assert record.read_text().split()[:4] == ["-m", "minifier", "versions", launcher]
