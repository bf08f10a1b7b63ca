"""aoti-lsp against torch-free fake dumps and fake minifiers: what must hold without compiling
anything (no torch import, bad launchers, children that crash, print garbage or lose their run
folder, event -> progress/refresh ordering, clients without progress or dynamic registration,
malformed client messages, workspace trust changes, debugDirRoots)."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from lsp_helpers import (
    FAKE_RUN_REPRO_LINE,
    alive,
    fake_dump,
    fake_python,
    lsp_session,
    until,
    uri,
    vscode_capabilities,
    write,
)
from lsprotocol import types

from minifier.contract.events import (
    CandidateEvent,
    CheckpointEvent,
    DoneEvent,
    ErrorEvent,
    LogEvent,
    StandaloneEvent,
    StartEvent,
    encode_event,
)
from minifier.contract.signature import Signature


async def test_server_never_imports_torch(tmp_path):
    """A `torch` that refuses to import sits first on the server's path; a full session with a
    failure (discovery, diagnostics, hover, documents, actions) must never touch it."""
    marker = tmp_path / "torch-was-imported"
    write(
        str(tmp_path / "poison" / "torch" / "__init__.py"),
        f"open({str(marker)!r}, 'w').close()\nraise ImportError('aoti-lsp imported torch')\n",
    )
    launcher = fake_dump(str(tmp_path / "ws"))
    kernel = str(tmp_path / "ws" / "kernels" / "ck.kernel.cpp")
    async with lsp_session(str(tmp_path / "ws"), env={"PYTHONPATH": str(tmp_path / "poison")}) as client:
        diagnostics = await until(lambda: client.diagnostics.get(uri(launcher)), "the launcher diagnostic")
        assert await client.hover(uri(kernel), 3)
        assert await client.code_actions(uri(launcher), list(diagnostics))
        [item] = await client.failures()
        assert "def forward" in await client.content(item["graphUri"])
    assert not marker.exists()


async def test_bad_launchers_get_one_clear_diagnostic_and_no_actions(tmp_path):
    ws = str(tmp_path / "ws")
    ran = tmp_path / "minifier-ran"
    python = fake_python(str(tmp_path / "python"), [], before=f"touch {ran}")
    not_python = fake_dump(ws, "run_1-pid_1", failure=False, launcher_text="def broken(:\n")
    no_pt2 = fake_dump(ws, "run_2-pid_2", failure=False)
    os.remove(os.path.join(os.path.dirname(no_pt2), "checkpoints", "exported_program.pt2"))
    dynamo = fake_dump(
        ws,
        "run_3-pid_3",
        failure=False,
        launcher_text=(
            "from torch._dynamo.repro.after_dynamo import run_repro\nclass Repro: pass\ndef load_args(reader): pass\n"
            "run_repro(Repro(), load_args, backend='aot_eager')\n"
        ),
    )
    good = fake_dump(ws, "run_4-pid_4")
    # keepWarm 0: nothing at all may run, not even the warm-up that the reproduced good launcher would get
    async with lsp_session(ws, settings={"trusted": True, "python": python, "keepWarm": 0}) as client:
        await until(
            lambda: all(client.diagnostics.get(uri(p)) for p in (not_python, no_pt2, dynamo, good)),
            "diagnostics on all four launchers",
        )
        reasons = {
            not_python: "not valid Python",
            no_pt2: "exported program is missing",
            dynamo: "backend='aot_eager'",
        }
        for launcher, reason in reasons.items():
            [diagnostic] = client.diagnostics[uri(launcher)]
            assert diagnostic.range.start.line == 0 and diagnostic.severity == types.DiagnosticSeverity.Error
            assert reason in diagnostic.message and "cannot use this launcher" in diagnostic.message
            assert await client.code_actions(uri(launcher), [diagnostic]) == []
            assert client.state(launcher) == "error"
        bad_id = client.item(no_pt2)["id"]
        await client.command("aoti.minify", bad_id)
        await until(lambda: any("cannot use the launcher" in m.message for m in client.messages), "a refusal")
        [diagnostic] = client.diagnostics[uri(good)]
        assert diagnostic.range.start.line == FAKE_RUN_REPRO_LINE
        assert "CppCompileError" in diagnostic.message
    assert not ran.exists()


@pytest.mark.parametrize(
    "tail, expected",
    [
        ("kill -SEGV $$", "killed by SIGSEGV"),
        ("exit 4", "no torch in this interpreter"),
    ],
)
async def test_minifier_child_crashing_or_printing_garbage(tmp_path, tail, expected):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws, failure=False)
    events = [
        "this is not JSON",
        '{"event": "nonsense", "v": 1}',
        '{"event": "log", "message": "x", "v": 99}',
        LogEvent(message="reproducing"),
        "\x00\xff garbage",
    ]
    if tail == "exit 4":
        events.append(ErrorEvent(code="environment", message="no torch in this interpreter"))
    python = fake_python(str(tmp_path / "python"), events, tail=f"echo '[aoti-minify] stderr line' >&2\n{tail}")
    async with lsp_session(ws, settings={"trusted": True, "python": python}) as client:
        await until(lambda: client.state(launcher) == "error", "the error state")
        assert expected in client.item(launcher)["message"]
        assert len(client.logged("ignored output of aoti-minify")) == 4
        assert client.logged(r"v99 is not the supported v1")
        assert client.logged(r"\[aoti-minify\] stderr line")
        [diagnostic] = await client.diagnostics_on(launcher, "aoti-minify failed")
        assert "aoti-minify failed" in diagnostic.message and expected in diagnostic.message
        assert not [m for m in client.messages if m.type == types.MessageType.Error], "background runs do not pop up"
        assert len(await client.failures()) == 1  # still serving


async def test_run_folder_deleted_while_its_job_runs(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    run_dir = os.path.dirname(os.path.dirname(launcher))
    python = fake_python(
        str(tmp_path / "python"),
        [StartEvent(nodes=5, signature=Signature("E", "m"))],
        tail='echo "pid $$" >&2\nexec sleep 60',
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python}) as client:
        await until(lambda: client.item(launcher), "discovery")
        await client.command("aoti.minify", client.item(launcher)["id"])
        [pid] = [int(m.group(1)) for m in await until(lambda: client.logged(r": pid (\d+)$"), "the child's pid")]
        shutil.rmtree(run_dir)
        client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams(
                changes=[types.FileEvent(uri=uri(run_dir), type=types.FileChangeType.Deleted)]
            )
        )
        await until(lambda: client.failure_lists[-1] == [], "the failure to go away")
        await until(
            lambda: uri(launcher) in client.diagnostics and not client.diagnostics[uri(launcher)],
            "its diagnostics to be cleared",
        )
        await until(lambda: not alive(pid), "the child to be stopped", timeout=15)
        assert client.logged(r"was deleted")
        assert await client.failures() == []


def headers(texts: list[str]) -> list[tuple[str, str]]:
    """(node history, state) of each refreshed graph document, repeats dropped."""
    seen = [(re.match(r"# ([\d >-]+) nodes", t)[1], t.splitlines()[1].split(":")[0]) for t in texts]
    return [h for i, h in enumerate(seen) if i == 0 or seen[i - 1] != h]


async def test_graph_refreshes_and_progress_follow_checkpoints_in_order(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    folder = os.path.dirname(launcher)
    signature = Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error")
    checkpoints = [
        CheckpointEvent(
            nodes=n, path=os.path.join(folder, "checkpoints", f"{n}.py"), graph=f"graph_{n}", queries=q, seconds=q
        )
        for n, q in ((4, 1), (2, 3), (1, 5))
    ]
    python = fake_python(
        str(tmp_path / "python"),
        [
            StartEvent(nodes=5, signature=signature, graph="graph_5"),
            CandidateEvent(nodes=4, verdict="fails", seconds=1.0, queries=1),
            *checkpoints,
            DoneEvent(
                nodes=1,
                repro=os.path.join(folder, "repro.py"),
                queries=5,
                seconds=5,
                start_nodes=5,
                signature=signature,
            ),
        ],
        pause=0.3,
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python}) as client:
        await until(lambda: client.item(launcher), "discovery")
        failure_id = client.item(launcher)["id"]
        graph = f"aoti:/{failure_id}/graph.py"
        await client.command("aoti.minify", failure_id)
        await until(lambda: client.state(launcher) == "minimized", "the minimized state")
        texts = await client.refreshed_until(graph, "minimized")
        assert headers(texts) == [
            ("5", "# minifying"),
            ("5 -> 4", "# minifying"),
            ("5 -> 4 -> 2", "# minifying"),
            ("5 -> 4 -> 2 -> 1", "# minifying"),
            ("5 -> 4 -> 2 -> 1", "# minimized"),
        ]
        assert [t.splitlines()[-1] for t in texts][-4:] == ["graph_4", "graph_2", "graph_1", "graph_1"]
        assert texts[-1].startswith("# 5 -> 4 -> 2 -> 1 nodes, 5 queries, 5 s\n")
        # the shrink picture is refreshed with the graph: each checkpoint a point, then the graph
        [shrink] = await until(
            lambda: [t for t in client.refreshed(f"aoti:/{failure_id}/shrink.md")[-1:] if "| 5.0 | 1 |" in t],
            "the shrink picture's last refresh",
        )
        assert "![shrink curve" in shrink and "| 3.0 | 2 |" in shrink and "graph_1" in shrink
        [(_token, reports)] = client.progress_reports.items()
        await until(lambda: isinstance(reports[-1], types.WorkDoneProgressEnd), "the progress end")
        begin, *middle, end = reports
        assert begin.title == f"Minifying {failure_id}" and begin.cancellable
        assert [r.percentage for r in middle] == [0, 0, 25, 75, 100]
        assert [r.message.split(",")[0] for r in middle] == ["5 -> 5 nodes"] * 2 + [
            "5 -> 4 nodes",
            "5 -> 2 nodes",
            "5 -> 1 nodes",
        ]
        assert end.message == "minimized: 5 -> 1 nodes, 5 queries, 5 s"


def fast_minify(tmp_path, ws: str, name: str) -> tuple[str, str]:
    """A dump and a stand-in minifier that finishes at once, as a minify does when the first round's
    1-node slice wins: start, checkpoint and done within a millisecond."""
    launcher = fake_dump(os.path.join(ws, name), run=f"run_{name}-pid_1")
    folder = os.path.dirname(launcher)
    signature = Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error")
    python = fake_python(
        str(tmp_path / f"python-{name}"),
        [
            StartEvent(nodes=5, signature=signature, graph="graph_5"),
            CheckpointEvent(nodes=1, path=os.path.join(folder, "checkpoints", "1.py"), graph="graph_1", queries=3),
            DoneEvent(
                nodes=1,
                repro=os.path.join(folder, "repro.py"),
                queries=3,
                seconds=1,
                start_nodes=5,
                signature=signature,
            ),
        ],
        before=f"echo '# repro' > {folder}/repro.py; sleep 1",
    )
    return launcher, python


async def test_fast_minifications_at_once_leave_every_graph_showing_its_end(tmp_path):
    """The GPU session's failure (test_gpu_session.py): four minifications at once, each done within a
    millisecond of its checkpoint, on a client that takes its time to fetch a refreshed document. The
    graph document must end showing the minimized state, whenever the client gets round to it."""
    ws = str(tmp_path / "ws")
    minifies = [fast_minify(tmp_path, ws, name) for name in "abcd"]
    async with lsp_session(ws, settings={"trusted": True, "keepWarm": 0}) as client:
        client.refresh_delay = 0.5
        await until(lambda: all(client.item(launcher) for launcher, _ in minifies), "discovery")
        for launcher, python in minifies:
            # one interpreter per failure: each job reads the setting as it starts
            client.workspace_did_change_configuration(
                types.DidChangeConfigurationParams(settings={"aoti": {"python": python}})
            )
            await client.command("aoti.minify", client.item(launcher)["id"])
            await until(lambda python=python: client.logged(f"started {python} "), "the job to start")
        for launcher, _ in minifies:
            repro = os.path.join(os.path.dirname(launcher), "repro.py")
            await until(
                lambda launcher=launcher, repro=repro: (
                    client.state(launcher) == "minimized" and client.diagnostics.get(uri(repro))
                ),
                "minimized, with its repro diagnostic",
            )
            graph = client.item(launcher)["graphUri"]
            # read right after the diagnostic, the refresh may still be on its way (the GPU test's mistake)
            final = await client.refreshed_until(graph, "minimized")
            assert final[-1].startswith("# 5 -> 1 nodes, 3 queries, 1 s\n") and final[-1].endswith("graph_1\n")
        assert not client.logged("refresh")


async def test_a_failed_refresh_does_not_turn_the_live_graph_off(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    folder = os.path.dirname(launcher)
    signature = Signature("E", "m")
    python = fake_python(
        str(tmp_path / "python"),
        [
            StartEvent(nodes=5, signature=signature),
            *[
                CheckpointEvent(nodes=n, path=os.path.join(folder, "checkpoints", f"{n}.py"), graph=f"graph_{n}")
                for n in (4, 2, 1)
            ],
            DoneEvent(nodes=1, repro=os.path.join(folder, "repro.py"), queries=5, seconds=5, start_nodes=5),
        ],
        pause=0.5,
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python}) as client:
        client.failing_refreshes = 2
        await until(lambda: client.item(launcher), "discovery")
        graph = client.item(launcher)["graphUri"]
        await client.command("aoti.minify", client.item(launcher)["id"])
        texts = await client.refreshed_until(graph, "minimized")
        assert texts[-1].splitlines()[-1] == "graph_1"
        assert len(client.logged("the client failed a workspace/textDocumentContent/refresh")) == 1
        assert client.logged(r"refresh works again after 2 failed request\(s\)")


async def test_malformed_client_messages_are_logged_and_the_server_keeps_serving(tmp_path):
    launcher = fake_dump(str(tmp_path / "ws"))
    async with lsp_session(str(tmp_path / "ws")) as client:
        await until(lambda: client.item(launcher), "discovery")
        for body in (
            b'{"jsonrpc": "2.0", "method": "workspace/didChangeWatchedFiles", "params": {"changes": 7}}',
            b'{"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", '
            b'"params": {"settings": {"aoti": {"workers": "many", "python": 3}}}}',
            b'{"jsonrpc": "2.0", "method": "aoti/unknown", "params": {}}',
        ):
            client.protocol.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await until(lambda: client.logged("setting python=3 ignored"), "the bad settings to be reported")
        assert client.logged(
            r"aoti-lsp internal error .*caused by ClassValidationError: While structuring "
            r"DidChangeWatchedFilesNotification"
        )
        assert client.logged("setting workers='many' ignored: expected an integer >= 1")
        assert len(await client.failures()) == 1
        assert client.messages == []  # nothing popped up


async def test_trust_granted_later_starts_background_work_and_revoking_it_stops_it(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws, failure=False)
    python = fake_python(str(tmp_path / "python"), [], tail='echo "pid $$" >&2\nexec sleep 60')
    async with lsp_session(ws, settings={"python": python}) as client:
        await until(lambda: client.state(launcher) == "found", "discovery")
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"aoti": {"trusted": True}})
        )
        await until(lambda: client.state(launcher) == "reproducing", "the background reproduction")
        [pid] = [int(m.group(1)) for m in await until(lambda: client.logged(r": pid (\d+)$"), "the child's pid")]
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"trusted": False}))
        await until(lambda: client.state(launcher) == "cancelled", "the reproduction to be cancelled")
        assert not alive(pid) and client.logged("no longer trusted")
        [diagnostic] = await client.diagnostics_on(launcher, "cancelled: ")
        assert diagnostic.message == "AOTI failure dumped here; cancelled: reproduction cancelled"


async def test_debug_dir_roots_outside_the_workspace(tmp_path):
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    launcher = fake_dump(str(elsewhere))
    capabilities = vscode_capabilities()
    capabilities.workspace.did_change_watched_files.relative_pattern_support = True
    async with lsp_session(str(ws), capabilities=capabilities) as client:
        await until(lambda: client.logged(r"scanned .*: 0 failure"), "the scan of an empty workspace")
        [first] = await until(lambda: client.registrations, "the file watchers")
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"aoti": {"debugDirRoots": ["../elsewhere"]}})
        )
        await until(lambda: client.item(launcher), "the dump outside the workspace")
        [diagnostic] = await client.diagnostics_on(launcher)
        assert diagnostic.range.start.line == FAKE_RUN_REPRO_LINE
        [second] = await until(lambda: [r for r in client.registrations if r.id != first.id], "new file watchers")
        assert client.registrations == [second]  # the first ones were unregistered
        relative = [w["globPattern"] for w in second.register_options["watchers"] if isinstance(w["globPattern"], dict)]
        assert {g["baseUri"] for g in relative} == {uri(elsewhere)} and len(relative) == 3
        shutil.rmtree(elsewhere)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"debugDirRoots": []}))
        await until(lambda: client.failure_lists[-1] == [], "the dump to be forgotten")


async def test_minify_during_a_background_reproduction_replaces_it(tmp_path):
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws, failure=False)
    folder = os.path.dirname(launcher)
    signature = Signature("E", "m")
    python = fake_python(
        str(tmp_path / "python"),
        [
            StartEvent(nodes=2, signature=signature),
            DoneEvent(nodes=1, repro=os.path.join(folder, "repro.py"), queries=1, seconds=1, start_nodes=2),
        ],
        before='if [ "$3" = run ]; then exec sleep 60; fi',
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python}) as client:
        await until(lambda: client.logged(r"started .* -m minifier run "), "the background reproduction")
        await until(lambda: client.state(launcher) == "reproducing", "the failure listed as reproducing")
        await client.command("aoti.minify", client.item(launcher)["id"])
        await until(lambda: client.state(launcher) == "minimized", "the minification")
        assert client.logged(r"cancelling run \(minification requested\)")
        states = [items[0]["state"] for items in client.failure_lists]
        assert [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s] == [
            "reproducing",
            "cancelled",
            "minifying",
            "minimized",
        ]


async def test_a_dump_no_file_event_reported_still_shows_up(tmp_path):
    """The client watches files (VS Code), but its watcher misses a run folder copied in one go, as
    VS Code's missed capture's snapshots: the server's own look at the debug folders finds it, and
    notices when it is deleted."""
    ws = str(tmp_path / "ws")
    first = fake_dump(ws)
    async with lsp_session(ws) as client:
        await until(lambda: client.item(first), "discovery")
        assert client.registrations, "the client was asked to watch files"
        second = fake_dump(ws, run="run_2026_01_01_00_00_01_000000-pid_2")  # no didChangeWatchedFiles follows
        await until(lambda: client.item(second), "the unreported dump", timeout=15)
        shutil.rmtree(os.path.dirname(os.path.dirname(second)))
        await until(lambda: client.item(second) is None and client.item(first), "its unreported removal", timeout=15)


async def test_a_workaround_asked_for_after_done_waits_for_the_standalone_check(tmp_path):
    # `done` comes before repro_standalone.py is checked (seconds more, in the same process): the user who asks for
    # a workaround at once is not told to come back later
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws)
    folder = os.path.dirname(launcher)
    signature = Signature("E", "m")
    standalone = StandaloneEvent(path=os.path.join(folder, "repro_standalone.py"), seconds=2.0)
    python = fake_python(
        str(tmp_path / "python"),
        [
            StartEvent(nodes=2, signature=signature),
            DoneEvent(nodes=1, repro=os.path.join(folder, "repro.py"), queries=1, seconds=1, start_nodes=2),
        ],
        tail=f"sleep 2\ncat <<'EVENT'\n{encode_event(standalone)}\nEVENT\nexit 0",
    )
    async with lsp_session(ws, settings={"trusted": True, "python": python}) as client:
        await until(lambda: client.item(launcher), "discovery")
        failure_id = client.item(launcher)["id"]
        await client.command("aoti.minify", failure_id)
        await until(lambda: client.state(launcher) == "minimized", "done")
        await client.command("aoti.triage", failure_id)
        assert any("starts once repro_standalone.py is checked" in m.message for m in client.messages)
        assert client.logged(r"minify ended")  # the triage command returned only after the minify's process
        await until(lambda: client.logged(r"started .* -m minifier triage "), "the workaround search")
        assert not any("is being worked on" in m.message for m in client.messages)
