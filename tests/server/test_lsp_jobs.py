"""Real background work on CPU: a minification driven through the code action's command while a
second failure auto-reproduces and a third one appears, then cancellation of running jobs."""

from __future__ import annotations

import asyncio
import glob
import os
import re
import sys

import pytest
from lsp_helpers import AotiClient, alive, lsp_session, processes_in, until, uri
from lsprotocol import types

from minifier.contract.layout import DumpLayout
from minifier.contract.lock import holder as lock_holder
from minifier.exchange.worklog import forked_by

pytestmark = pytest.mark.compile


def progress(client: AotiClient, title: str) -> tuple[str, list]:
    """The (token, reports) of the one progress whose begin title is `title`."""
    [found] = [
        (token, reports)
        for token, reports in client.progress_reports.items()
        if reports and isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].title == title
    ]
    return found


def ended(client: AotiClient, title: str) -> bool:
    try:
        return isinstance(progress(client, title)[1][-1], types.WorkDoneProgressEnd)
    except ValueError:
        return False


async def test_background_minification_with_concurrent_failures(tmp_path, dumps):
    ws = tmp_path / "ws"
    a = dumps.get(str(ws / "a"), reproduced=True)  # minified through the code action
    b = dumps.get(str(ws / "b"))  # no failure.json: reproduced in the background at once
    repro = os.path.join(os.path.dirname(a), "repro.py")
    async with lsp_session(str(ws), settings={"trusted": True, "workers": 2}) as client:
        diagnostics = await until(lambda: client.diagnostics.get(uri(a)), "the launcher diagnostic of a")
        await until(lambda: client.state(b) == "reproducing", "b to be reproduced in the background")
        id_a, id_b = client.item(a)["id"], client.item(b)["id"]
        assert id_a != id_b  # copies of one dump share the run folder's name

        [action] = [x for x in await client.code_actions(uri(a), list(diagnostics)) if x.title == "Minify this failure"]
        await client.command(action.command.command, *action.command.arguments)
        await until(lambda: client.state(a) == "minifying", "a to be minifying")
        doc = types.TextDocumentItem(uri=uri(a), language_id="python", version=1, text=open(a).read())
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=doc))
        client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri(a)))
        )

        await client.command("aoti.minify", id_a)  # focuses the running job instead of starting another
        graph_uri = f"aoti:/{id_a}/graph.py"
        await until(lambda: [d for d in client.shown_documents if d.uri == graph_uri], "the graph to be shown")
        assert [x.title for x in await client.code_actions(uri(a), list(client.diagnostics[uri(a)]))] == [
            "Show shrinking graph",
            "Cancel minification",
            "Show failing kernel",
        ]

        c = dumps.get(str(ws / "c"), reproduced=True)  # a launcher appears while the jobs run
        client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams(changes=[types.FileEvent(uri=uri(c), type=types.FileChangeType.Created)])
        )
        [on_c] = await until(lambda: client.diagnostics.get(uri(c)), "the diagnostic of the new launcher")
        assert on_c.message.startswith("AOTI failure: CppCompileError") and client.state(c) == "reproduced"
        # a's job is untouched by the rescan; on a loaded machine it may already have finished by now
        assert client.state(a) in ("minifying", "minimized")

        await until(lambda: client.state(b) == "reproduced", "b to be reproduced", timeout=240)
        assert client.item(b)["signature"] == "CppCompileError: 'compile' was not declared in this scope"
        await until(lambda: client.state(a) == "minimized", "a to be minimized", timeout=300)

        item = client.item(a)
        assert (item["nodesStart"], item["nodesNow"], item["repro"]) == (3, 1, uri(repro))
        assert re.fullmatch(r"minimized: 3 -> 1 nodes, \d+ queries, \d+ s", item["message"])
        await until(lambda: ended(client, f"Minifying {id_a}"), "the progress end")
        _, reports = progress(client, f"Minifying {id_a}")
        begin, *middle, end = reports
        assert begin.cancellable and begin.percentage == 0
        assert middle and all(isinstance(r, types.WorkDoneProgressReport) for r in middle)
        assert all(re.fullmatch(r"3 -> [123] nodes, \d+ queries, \d+ s", r.message) for r in middle)
        percentages = [r.percentage for r in middle]
        assert percentages == sorted(percentages) and percentages[-1] == 100
        assert end.message == item["message"]
        # b's state changes on its last event; the progress ends when its aoti-minify exits, which on a
        # loaded machine can come after a's whole minification
        assert progress(client, f"Reproducing {id_b}")
        await until(lambda: ended(client, f"Reproducing {id_b}"), "the progress end of b's reproduction", timeout=60)

        texts = await client.refreshed_until(graph_uri, "minimized")
        nodes = client.minified_nodes(graph_uri)
        assert nodes == sorted(nodes, reverse=True) and nodes[-1] == 1  # 3 -> 2 -> 1 or 3 -> 1
        assert re.match(r"# 3 -> (2 -> )?1 nodes", texts[-1]) and "relu" in texts[-1]

        [on_repro] = await until(lambda: client.diagnostics.get(uri(repro)), "the repro.py diagnostic")
        assert on_repro.severity == types.DiagnosticSeverity.Information
        assert (
            on_repro.message == "minimal repro: 1 node, reproduces CppCompileError: "
            "'compile' was not declared in this scope"
        )
        await client.command("aoti.openRepro", id_a)
        await until(lambda: client.shown_documents[-1].uri == uri(repro), "repro.py to be shown")
        assert {i["state"] for i in await client.failures()} == {"minimized", "reproduced"}

        # b's background reproduction and a's minify (two aoti-minify processes) forked their workers
        # from one fork server, kept warm by the first for the next
        logs = glob.glob(str(ws / "**" / "aoti-lens-work" / "worker-*.log"), recursive=True)
        servers = set().union(*(forked_by(open(log).read()) for log in logs))
        assert len(logs) >= 3 and len(servers) == 1, (logs, servers)
        [fork_server] = servers
        assert alive(fork_server)
    assert not [m for m in client.messages if m.type == types.MessageType.Error]
    await until(lambda: processes_in(str(tmp_path)) == [], "no process left behind", timeout=15)
    await until(lambda: not alive(fork_server), "the fork server to end with the language server", timeout=15)


async def test_cancel_by_command_and_from_the_progress_bar(tmp_path, dumps):
    ws = tmp_path / "ws"
    a = dumps.get(str(ws / "a"), reproduced=True)
    b = dumps.get(str(ws / "b"), reproduced=True)
    async with lsp_session(str(ws), settings={"trusted": True, "workers": 1, "autoReproduce": False}) as client:
        await until(lambda: client.item(a) and client.item(b), "discovery")
        id_a, id_b = client.item(a)["id"], client.item(b)["id"]
        for failure_id in (id_a, id_b):
            await client.command("aoti.minify", failure_id)
        started = await until(
            lambda: len(client.logged(r"\(pid \d+\)$")) == 2 and client.logged(r"\(pid (\d+)\)$"),
            "both children to start",
        )
        pids = [int(m.group(1)) for m in started]
        await asyncio.sleep(2)  # into the minifier's worker start-up

        await client.command("aoti.cancel", id_a)
        token_b, _ = progress(client, f"Minifying {id_b}")
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token_b))

        await until(lambda: client.state(a) == client.state(b) == "cancelled", "both to be cancelled", timeout=60)
        await until(
            lambda: ended(client, f"Minifying {id_a}") and ended(client, f"Minifying {id_b}"), "both progress ends"
        )
        assert all(client.item(p)["message"].startswith("cancelled at 3") for p in (a, b))
        assert client.logged(f"{id_a}: cancelling minify \\(cancelled by the user\\)")
        assert client.logged(f"{id_b}: cancelling minify \\(cancelled from the progress bar\\)")
        assert not any(alive(pid) for pid in pids)
        await until(lambda: processes_in(str(tmp_path)) == [], "the minifiers' workers to be gone", timeout=20)
        await client.command("aoti.cancel", id_a)
        await until(lambda: any("nothing is running" in m.message for m in client.messages), "a no-op answer")


async def test_discovery_warms_the_workers_for_the_first_minify(tmp_path, dumps):
    # Reproduced in an earlier session: discovery has nothing to run, so it only warms the workers up.
    a = dumps.get(str(tmp_path / "ws" / "a"), reproduced=True)
    async with lsp_session(str(tmp_path / "ws"), settings={"trusted": True, "workers": 1}) as client:
        await until(lambda: client.logged(r"the minifier's workers are warm for 600 s"), "the warm-up", timeout=120)
        work = os.path.join(os.path.dirname(a), "aoti-lens-work")
        [warm] = re.findall(r"=== fork server (\d+) started", open(os.path.join(work, "forkserver.log")).read())
        await client.command("aoti.minify", client.item(a)["id"])
        await until(lambda: client.state(a) == "minimized", "a to be minimized", timeout=300)
        logs = glob.glob(os.path.join(work, "worker-*.log"))
        assert set().union(*(forked_by(open(log).read()) for log in logs)) == {int(warm)}


@pytest.mark.slow
async def test_a_terminal_minify_during_the_editors_reproduction_waits_for_it_and_is_followed(tmp_path, dumps):
    """The common flow: a dump appears, the editor reproduces it in the background, and meanwhile the user types
    the minify command PyTorch printed. The terminal's minify waits for the reproduction (no exit 6), then runs,
    shown live in the editor: its state, the shrinking graph, and repro.py's diagnostic at the end."""
    ws = tmp_path / "ws"
    launcher = dumps.get(str(ws / "a"))  # no failure.json: reproduced in the background at once
    layout = DumpLayout.of(launcher)
    async with lsp_session(str(ws), settings={"trusted": True, "keepWarm": 0}) as client:
        await until(lambda: (h := lock_holder(layout.lock)) is not None and h.command == "run", "the reproduction")
        terminal = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "minifier", "minify", launcher, "--workers", "2",
            cwd=os.path.dirname(launcher), stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        item = await until(
            lambda: (i := client.item(launcher)) and i["externalPid"] == terminal.pid and i, "the minify", timeout=120
        )
        assert item["state"] == "minifying" and "started outside the editor" in item["message"]
        # the reproduction ended first (the minify waited for its lock), with its result; the server may see the
        # minify take the lock a moment before it reads the reproduction's exit
        await until(lambda: client.logged(r": run ended: reproduced in \d+ s"), "the reproduction's result", 30)
        assert not client.logged(r": run failed"), "the record the minify moved on is not the reproduction's result"
        failure_id = item["id"]
        [on_repro] = await until(lambda: client.diagnostics.get(uri(layout.repro_py)), "repro.py's diagnostic", 300)
        assert on_repro.message.startswith("minimal repro: 1 node")
        _, err = await terminal.communicate()
        assert terminal.returncode == 0, err.decode()[-3000:]
        assert "is reproducing this dump: waiting for it, then using its result" in err.decode()
        await until(lambda: client.state(launcher) == "minimized", "the end of the terminal's minify")
        assert client.minified_nodes(f"aoti:/{failure_id}/graph.py")[-1] == 1  # the live graph followed it
    assert not [m for m in client.messages if m.type == types.MessageType.Error]
