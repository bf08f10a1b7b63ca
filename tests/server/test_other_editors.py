"""aoti-lsp as other editors run it (docs/editors.md): `aoti-lsp --stdio` with Neovim's and Helix's
client capabilities, settings pulled with workspace/configuration, no dynamic registration, no
work-done progress, no aoti: documents, no aoti-lens handshake. Every feature must still reach the
user, in the standard LSP a generic client has. Torch-free fakes: seconds per test."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket

from lsp_helpers import fake_dump, fake_failure, fake_python, lsp_session, plain, processes_in, until, uri, write
from lsprotocol import types
from pytest_lsp import client_capabilities

from minifier.contract.events import (
    BeginEvent,
    CandidateEvent,
    CheckpointEvent,
    DoneEvent,
    FailureEvent,
    StartEvent,
    encode_event,
)
from minifier.contract.layout import DumpLayout
from minifier.contract.signature import Signature

SIGNATURE = Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error")
SCRIPT = """import torch
from model import model, inputs

program = torch.export.export(model, inputs)
path = torch._inductor.aoti_compile_and_package(program)  # a lens here
runner = torch._inductor.aoti_load_package(path)  # and here
# aoti_compile_and_package(program) in a comment: no lens
"""


def helix() -> types.ClientCapabilities:
    """Helix's initialize capabilities (helix-lsp/src/client.rs), as releases before file watching
    sent them and without work-done progress: no dynamic registration, no showDocument, no code lens,
    no textDocumentContent; it answers workspace/configuration from its `config`."""
    return types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(
            configuration=True,
            workspace_folders=True,
            apply_edit=True,
            did_change_configuration=types.DidChangeConfigurationClientCapabilities(dynamic_registration=False),
            execute_command=types.ExecuteCommandClientCapabilities(dynamic_registration=False),
        ),
        text_document=types.TextDocumentClientCapabilities(
            code_action=types.CodeActionClientCapabilities(
                code_action_literal_support=types.ClientCodeActionLiteralOptions(
                    code_action_kind=types.ClientCodeActionKindOptions(value_set=["", "quickfix", "refactor", "source"])
                ),
                is_preferred_support=True,
                data_support=True,
            ),
            hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
        ),
        window=types.WindowClientCapabilities(work_done_progress=False),
    )


def neovim() -> types.ClientCapabilities:
    """Neovim 0.11's (pytest-lsp ships them): on Linux it registers no file watchers."""
    capabilities = client_capabilities("neovim")
    assert capabilities.workspace.did_change_watched_files.dynamic_registration is False
    return capabilities


def pulled(client, settings: dict, scope: str | None = None) -> None:
    """What the editor's config holds for aoti-lsp: `settings = { aoti = {...} }` (nvim-lspconfig), or
    `[language-server.aoti-lsp.config.aoti]` (Helix)."""
    client.set_configuration({"aoti": settings}, scope_uri=scope)


async def test_helix_gets_every_result_as_plain_lsp(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    folder = os.path.dirname(launcher)
    repro = os.path.join(folder, "repro.py")
    python = fake_python(
        str(tmp_path / "python"),
        [
            StartEvent(nodes=5, signature=SIGNATURE, graph="def forward(self, x): ..."),
            CandidateEvent(nodes=3, verdict="fails", seconds=1.0, queries=1),
            CheckpointEvent(
                nodes=3, path=os.path.join(folder, "checkpoints", "3.py"), graph="g3", queries=1, seconds=1
            ),
            CheckpointEvent(
                nodes=1, path=os.path.join(folder, "checkpoints", "1.py"), graph="g1", queries=2, seconds=2
            ),
            DoneEvent(nodes=1, repro=repro, queries=2, seconds=2.5, start_nodes=5, signature=SIGNATURE),
        ],
        before=f"echo '# repro' > {repro}",
    )
    async with lsp_session(ws, capabilities=helix()) as client:
        pulled(client, {"trusted": True, "python": python})  # before `initialized`: the first pull sees it
        [diagnostic] = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        actions = await client.code_actions(uri(launcher), [diagnostic])
        assert [a.title for a in actions][:2] == ["Minify this failure", "Reproduce failure"]
        await client.command(actions[0].command.command, *actions[0].command.arguments)
        [on_repro] = await until(lambda: client.diagnostics.get(uri(repro)), "the repro.py diagnostic")
        assert on_repro.message.startswith("minimal repro: 1 node, reproduces CppCompileError")
        done = await until(lambda: [m.message for m in client.messages if "minimized" in m.message], "the end message")
        assert done == [
            f"aoti-lens: {diagnostic.data['failureId']}: minimized: 5 -> 1 nodes, 2 queries, 2 s; repro.py: {repro}"
        ]  # no progress bar: one message says how it ended
        failure_id = diagnostic.data["failureId"]
        await client.command("aoti.showGraph", failure_id)  # no showDocument, no aoti: documents: the file, in words
        await until(
            lambda: any(f"the smallest failing graph: {uri(repro)}" in m.message for m in client.messages),
            "the graph file's location",
        )
        await client.command("aoti.showShrink", failure_id)
        await until(
            lambda: any(
                "shrank: 5 nodes at 0 s -> 3 nodes at 1 s -> 1 nodes at 2 s" in m.message for m in client.messages
            ),
            "the shrink curve in words",
        )
        assert client.progress_reports == {} and client.registrations == [] and client.shown_documents == []
        assert client.refreshes == [] and client.failure_lists == []  # no aoti/* notifications to a generic client
        assert client.logged("cannot watch files")
    assert processes_in(str(tmp_path)) == []


def fake_capture(path: str, ws: str, staged: str) -> str:
    """A stand-in for `python -m minifier capture`: the dump appears (as PyTorch's would, snapshotted),
    its events log says capture (this very process) works on it, then its reproduction's events."""
    launcher = os.path.join(ws, "torch_compile_debug", os.path.basename(staged), "minifier", "minifier_launcher.py")
    log = DumpLayout.of(launcher).events_log
    kernel, model = os.path.join(ws, "kernels", "ck.kernel.cpp"), os.path.join(ws, "model.py")
    host = socket.gethostname()
    events = [
        [BeginEvent(command="capture", pid=0, host=host, started=0.0, launcher=launcher)],
        [
            BeginEvent(command="run", pid=0, host=host, started=0.0, launcher=launcher),
            FailureEvent(path="failure.json", failure=fake_failure(launcher, kernel, model)),
        ],
    ]
    parts = [
        write(f"{path}.events{i}", "".join(encode_event(e) + "\n" for e in batch)) for i, batch in enumerate(events)
    ]
    append = lambda part: f"sed 's/\"pid\":0/\"pid\":'$$'/' {part} >> {log}\n"  # noqa: E731  this process's pid
    before = (
        f"mkdir -p {os.path.dirname(log)}\n{append(parts[0])}cp -r {staged} {ws}/torch_compile_debug/\n"
        f"sleep 2\n{append(parts[1])}"
    )
    return fake_python(path, [], before=before)


async def test_neovim_captures_a_script_and_sees_its_failure_without_file_watching(tmp_path):
    ws, staging = tmp_path / "ws", tmp_path / "staging"
    script = write(str(ws / "train.py"), SCRIPT)
    staged = os.path.dirname(os.path.dirname(os.path.dirname(fake_dump(str(staging)))))
    staged_run = os.path.join(staged, os.listdir(staged)[0])
    python = fake_capture(str(tmp_path / "python"), str(ws), staged_run)
    async with lsp_session(str(ws), capabilities=neovim()) as client:
        pulled(client, {"trusted": True, "python": python, "keepWarm": 0})
        await until(lambda: client.logged(r"^scanned .*: 0 failure"), "the first scan")
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri(script)))
        )
        assert [(lens.range.start.line, lens.command.command, lens.command.arguments) for lens in lenses] == [
            (4, "aoti.capture", (uri(script),)),
            (5, "aoti.capture", (uri(script),)),
        ]
        await client.command("aoti.capture", uri(script))
        launcher = os.path.join(
            str(ws), "torch_compile_debug", os.path.basename(staged_run), "minifier", "minifier_launcher.py"
        )
        # Found by the server's own look at torch_compile_debug/ (no watchers), shown as being worked on:
        [found] = await until(lambda: client.diagnostics.get(uri(launcher)), "the captured dump", timeout=20)
        assert found.message.endswith("(reproducing it in the background)")
        await until(
            lambda: [
                d
                for d in client.diagnostics.get(uri(launcher), [])
                if d.message.endswith("(minify it to get a minimal repro)")
            ],
            "its reproduction",
        )
        await until(
            lambda: any("capture of train.py exited with status 0" in m.message for m in client.messages),
            "the capture's end",
        )
        assert client.logged(r"following aoti-minify capture \(pid \d+\) started outside the editor")
    assert processes_in(str(tmp_path)) == []


async def test_a_torch_compile_script_is_captured_with_torch_compile_s_dumps(tmp_path):
    ws = tmp_path / "ws"
    script = write(str(ws / "train.py"), "import torch\nfrom model import model, x\n\nfast = torch.compile(model)\n")
    async with lsp_session(str(ws), settings={"trusted": True, "keepWarm": 0}) as client:
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri(script)))
        )
        assert [(lens.range.start.line, lens.command.title) for lens in lenses] == [
            (3, "Capture torch.compile failures of this script")
        ]
        command = plain(await client.protocol.send_request_async("aoti/captureCommand", {"uri": uri(script)}))
        argv = command["argv"]
        assert argv[argv.index("capture") :][:5] == ["capture", "--dir", str(ws), "--compiler", "torch.compile"]
        assert argv[-1] == script


async def test_settings_are_pulled_per_workspace_folder(tmp_path):
    """Two folders, each with its own workers setting, answered only to workspace/configuration."""
    folders = [tmp_path / "a", tmp_path / "b"]
    launchers = [fake_dump(str(f), run=f"run_2026_01_01_00_00_0{i}_000000-pid_1") for i, f in enumerate(folders)]
    record = str(tmp_path / "argv")
    python = fake_python(str(tmp_path / "python"), [], before=f'echo "$@" >> {record}', tail="exit 3")
    async with lsp_session(str(folders[0]), capabilities=neovim(), folders=[str(f) for f in folders]) as client:
        pulled(client, {"trusted": True, "python": python, "autoReproduce": False, "keepWarm": 0})
        for n, folder in zip((3, 5), folders):
            pulled(client, {"trusted": False, "python": python, "workers": n}, scope=uri(folder))
        diagnostics = [await until(lambda la=la: client.diagnostics.get(uri(la)), "discovery") for la in launchers]
        for [diagnostic] in diagnostics:
            await client.command("aoti.minify", diagnostic.data["failureId"])
        lines = await until(
            lambda: (
                os.path.isfile(record)
                and len(open(record).read().splitlines()) == 2
                and open(record).read().splitlines()
            ),
            "both jobs",
        )
        by_folder = {line.split()[3]: line for line in lines}
        assert "--workers 3" in by_folder[launchers[0]] and "--workers 5" in by_folder[launchers[1]]
        # A folder cannot revoke the window's trust (both jobs ran although the folders say false).
        client.set_configuration({"aoti": {"trusted": True, "python": python, "workers": 7}}, scope_uri=uri(folders[0]))
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await until(lambda: client.logged("aoti-minify rejected its arguments|bad input"), "the jobs' ends")
        [diagnostic] = client.diagnostics[uri(launchers[0])]
        await client.command("aoti.minify", diagnostic.data["failureId"])
        await until(lambda: "--workers 7" in open(record).read(), "the re-pulled setting")
    shutil.rmtree(tmp_path / "a")


async def test_a_minify_started_in_a_terminal_shows_live_and_its_curve_after_a_restart(tmp_path):
    """What a terminal's `aoti-minify minify` appends to the events log reaches the view, the graph
    document and the diagnostics while it runs; a server started later recalls the shrink curve."""
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    folder = os.path.dirname(launcher)
    layout = DumpLayout.of(launcher)
    repro = layout.repro_py
    events = [
        StartEvent(nodes=5, signature=SIGNATURE, graph="graph_5"),
        CheckpointEvent(nodes=3, path=layout.checkpoint_py(3), graph="graph_3", queries=2, seconds=1.5),
        CheckpointEvent(nodes=1, path=layout.checkpoint_py(1), graph="graph_1", queries=4, seconds=3.0),
        DoneEvent(nodes=1, repro=repro, queries=4, seconds=3.2, start_nodes=5, signature=SIGNATURE),
    ]
    parts = [write(str(tmp_path / f"part{i}"), encode_event(e) + "\n") for i, e in enumerate(events)]
    begin = write(
        str(tmp_path / "begin"),
        encode_event(BeginEvent(command="minify", pid=0, host=socket.gethostname(), started=0.0, launcher=launcher))
        + "\n",
    )
    steps = "".join(f"cat {part} >> {layout.events_log}\nsleep 1.5\n" for part in parts[:-1])
    terminal = fake_python(
        str(tmp_path / "aoti-minify"),
        [],
        before=(
            f"mkdir -p {layout.work}\nsed 's/\"pid\":0/\"pid\":'$$'/' {begin} >> {layout.events_log}\nsleep 1\n{steps}"
            f"echo '# repro' > {repro}\ncat {parts[-1]} >> {layout.events_log}\n"
        ),
    )
    async with lsp_session(ws, settings={"trusted": True, "keepWarm": 0}) as client:
        await until(lambda: client.item(launcher), "discovery")
        failure_id = client.item(launcher)["id"]
        process = await asyncio.create_subprocess_exec(terminal, "-m", "minifier", "minify", launcher, cwd=folder)
        item = await until(lambda: client.item(launcher)["externalPid"] and client.item(launcher), "the terminal's run")
        assert item["externalPid"] == process.pid and item["state"] == "minifying"
        await until(lambda: any(t.splitlines()[-1] == "graph_3" for u, t in client.refreshes), "the live graph")
        assert (await client.code_actions(uri(launcher), await client.diagnostics_on(launcher)))[
            1
        ].title == f"Stop aoti-minify (pid {process.pid})"
        [on_repro] = await until(lambda: client.diagnostics.get(uri(repro)), "the repro.py diagnostic", timeout=30)
        assert on_repro.message.startswith("minimal repro: 1 node")
        item = await until(lambda: client.item(launcher)["state"] == "minimized" and client.item(launcher), "the end")
        assert item["externalPid"] is None and (item["nodesStart"], item["nodesNow"]) == (5, 1)
        await process.wait()
    async with lsp_session(ws, settings={"keepWarm": 0}) as client:  # later: the curve is still there
        await until(lambda: client.item(launcher), "discovery")
        shrink = await client.content(f"aoti:/{failure_id}/shrink.md")
        assert "data:image/svg+xml;base64," in shrink and "| 1.5 | 3 |" in shrink and "| 3.0 | 1 |" in shrink
