"""aoti-lsp on real PyTorch dumps (the `dumps` fixture), in untrusted workspaces so nothing runs:
discovery, diagnostics, code actions, hover and virtual documents."""

from __future__ import annotations

import asyncio
import os

import pytest
from lsp_helpers import lsp_session, processes_in, until, uri
from lsprotocol import types

from minifier.contract.events import load_failure
from minifier.contract.launcher import read_launcher

pytestmark = pytest.mark.compile


def failure_json(launcher: str) -> str:
    return os.path.join(os.path.dirname(launcher), "failure.json")


async def test_discovery_puts_a_diagnostic_on_the_run_repro_line(tmp_path, dumps):
    launcher = dumps.get(str(tmp_path / "ws"))
    compiled = dumps.get(str(tmp_path / "ws"), compiler="torch.compile")  # torch.compile's launcher, same folder
    run_id = os.path.basename(os.path.dirname(os.path.dirname(launcher)))
    async with lsp_session(str(tmp_path / "ws")) as client:
        [diagnostic] = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        assert diagnostic.range.start.line == read_launcher(launcher).run_repro_line
        assert diagnostic.severity == types.DiagnosticSeverity.Warning
        assert diagnostic.message == "AOTI failure dumped here; reproduce or minify it"
        assert diagnostic.data == {"failureId": run_id} and diagnostic.source == "aoti-lens"
        [other] = await until(lambda: client.diagnostics.get(uri(compiled)), "the torch.compile launcher's")
        assert other.message == "torch.compile failure dumped here; reproduce or minify it"
        assert other.range.start.line == read_launcher(compiled).run_repro_line
        assert sorted(i["compiler"] for i in await client.failures()) == ["aoti_compile_and_package", "torch.compile"]
        assert client.item(compiled)["label"] == "torch.compile failure"
        item = client.item(launcher)
        assert set(item) == {
            "id",
            "label",
            "runDir",
            "launcher",
            "state",
            "signature",
            "kind",
            "nodesStart",
            "nodesNow",
            "queries",
            "seconds",
            "message",
            "repro",
            "graphUri",
            "kernelUri",
            "shrinkUri",
            "report",
            "externalPid",
            "compiler",
        }
        assert item["id"] == run_id and item["state"] == "found" and item["label"] == "AOTI failure"
        assert item["runDir"] == os.path.dirname(os.path.dirname(launcher)) and item["launcher"] == uri(launcher)
        assert item["graphUri"] == f"aoti:/{run_id}/graph.py" and item["kernelUri"] is None
        [registration] = client.registrations
        assert registration.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
        assert [w["globPattern"] for w in registration.register_options["watchers"]] == [
            "**/torch_compile_debug/run_*/minifier/{minifier_launcher.py,failure.json,repro.py,report.md}",
            "**/torch_compile_debug/run_*/minifier/checkpoints/*.py",
            "**/torch_compile_debug/run_*",
        ]


async def test_kernel_line_diagnostic_links_the_model_line_and_the_launcher(tmp_path, dumps):
    launcher = dumps.get(str(tmp_path / "ws"), reproduced=True)
    failure = load_failure(failure_json(launcher))
    kernel = failure.kernel
    async with lsp_session(str(tmp_path / "ws")) as client:
        [diagnostic] = await until(lambda: client.diagnostics.get(uri(kernel.file)), "the kernel diagnostic")
        assert (diagnostic.range.start.line, diagnostic.range.start.character) == (kernel.line - 1, kernel.column - 1)
        assert diagnostic.severity == types.DiagnosticSeverity.Error and diagnostic.code == "compile_error"
        assert "was not declared in this scope" in diagnostic.message and kernel.name in diagnostic.message
        related = {(r.location.uri, r.location.range.start.line): r.message for r in diagnostic.related_information}
        model = failure.model_lines[0]
        assert model.file.endswith(os.path.join("minifier", "examples", "models.py"))
        assert "relu" in related[(uri(model.file), model.line - 1)]
        assert (uri(launcher), read_launcher(launcher).run_repro_line) in related
        [on_launcher] = await client.diagnostics_on(launcher, "^AOTI failure: ")
        assert on_launcher.severity == types.DiagnosticSeverity.Error
        assert on_launcher.message.startswith("AOTI failure: CppCompileError: 'compile' was not declared in this scope")
        assert client.item(launcher)["state"] == "reproduced"


async def test_code_actions_on_launcher_and_kernel_diagnostics(tmp_path, dumps):
    launcher = dumps.get(str(tmp_path / "ws"), reproduced=True)
    kernel_file = load_failure(failure_json(launcher)).kernel.file
    async with lsp_session(str(tmp_path / "ws")) as client:
        on_launcher = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        on_kernel = await until(lambda: client.diagnostics.get(uri(kernel_file)), "the kernel diagnostic")
        # notifications arrive in order: the failure a diagnostic names is listed before it
        assert client.unlisted == []
        failure_id = client.item(launcher)["id"]
        for doc, diagnostics in ((launcher, on_launcher), (kernel_file, on_kernel)):
            actions = await client.code_actions(uri(doc), list(diagnostics))
            assert [(a.title, a.command.command) for a in actions] == [
                ("Minify this failure", "aoti.minify"),
                ("Reproduce failure", "aoti.reproduce"),
                ("Find a workaround", "aoti.triage"),
                ("Show failing kernel", "aoti.showKernel"),
            ]
            assert all(
                a.command.arguments == (failure_id,) and a.kind == types.CodeActionKind.QuickFix for a in actions
            )
            assert actions[0].is_preferred and actions[0].diagnostics == diagnostics
        unrelated = types.Diagnostic(
            range=on_launcher[0].range, message="x", source="pyright", data={"failureId": failure_id}
        )
        assert await client.code_actions(uri(launcher), [unrelated]) == []


async def test_hover_on_the_failing_kernel_line(tmp_path, dumps):
    launcher = dumps.get(str(tmp_path / "ws"), reproduced=True)
    failure = load_failure(failure_json(launcher))
    kernel = failure.kernel
    async with lsp_session(str(tmp_path / "ws")) as client:
        await until(lambda: client.item(launcher), "discovery")
        kernel_uri = client.item(launcher)["kernelUri"]
        assert kernel_uri == f"aoti:/{client.item(launcher)['id']}/kernels/{kernel.name}.py"
        for doc in (uri(kernel.file), kernel_uri):
            hover = await client.hover(doc, kernel.line - 1)
            text = hover.contents.value
            assert hover.contents.kind == types.MarkupKind.Markdown
            assert "`CppCompileError: 'compile' was not declared in this scope`" in text
            assert failure.headline in text and f"`{kernel.name}`" in text
            assert "**source nodes** `relu`, `sigmoid`" in text and "**ATen ops** `relu`, `sigmoid`" in text
            model = failure.model_lines[0]
            assert f"[models.py:{model.line}]({uri(model.file)}#L{model.line})" in text
            assert "**state** reproduced" in text
            assert await client.hover(doc, kernel.line) is None
        on_launcher = await client.hover(uri(launcher), read_launcher(launcher).run_repro_line)
        assert "**AOTI failure**" in on_launcher.contents.value


async def test_virtual_documents_graph_original_and_kernel(tmp_path, dumps):
    launcher = dumps.get(str(tmp_path / "ws"), reproduced=True)
    failure = load_failure(failure_json(launcher))
    async with lsp_session(str(tmp_path / "ws")) as client:
        item = await until(lambda: client.item(launcher), "discovery")
        graph = await client.content(item["graphUri"])
        assert graph.startswith("# 3 nodes, 0 queries, 0 s\n# reproduced: CppCompileError: ")
        assert failure.graph in graph and "torch.ops.aten.relu.default" in graph
        original = await client.content(f"aoti:/{item['id']}/original.py")
        assert original == f"# original graph of {item['id']}: 3 nodes\n\n{failure.graph}\n"
        kernel = await client.content(item["kernelUri"])
        assert kernel == failure.kernel_source
        assert "compile error!" in kernel.splitlines()[failure.kernel.line - 1]
        assert "no such aoti-lens document" in await client.content("aoti:/run_nope/graph.py")
        assert "has no kernel named" in await client.content(f"aoti:/{item['id']}/kernels/other.py")
        await client.command("aoti.showKernel", item["id"])
        await client.command("aoti.showGraph", item["id"])
        assert [d.uri for d in client.shown_documents] == [item["kernelUri"], item["graphUri"]]


async def test_untrusted_workspace_runs_nothing(tmp_path, dumps):
    launcher = dumps.get(str(tmp_path / "ws"))
    async with lsp_session(str(tmp_path / "ws"), settings={"autoReproduce": True}) as client:
        diagnostics = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        failure_id = client.item(launcher)["id"]
        assert [a.title for a in await client.code_actions(uri(launcher), list(diagnostics))] == [
            "Minify this failure",
            "Reproduce failure",
            "Find a workaround",
        ]
        for command in ("aoti.minify", "aoti.reproduce", "aoti.triage"):
            await client.command(command, failure_id)
        await until(lambda: len(client.messages) == 3, "three refusals")
        assert all("untrusted workspace" in m.message for m in client.messages)
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"aoti": {"workers": 2, "autoReproduce": True}})
        )
        assert (await client.failures())[0]["state"] == "found"
        await asyncio.sleep(1)
        assert client.state(launcher) == "found"
        assert client.progress_reports == {} and processes_in(str(tmp_path)) == []
    assert not os.path.exists(failure_json(launcher))
