"""The language server when things go wrong around it: killed mid-minify (no process may outlive it,
and its restart shows the last checkpoint), a dump another run holds, symlink loops and thousands
of run folders in the workspace."""

from __future__ import annotations

import glob
import os
import re
import time

import pytest
from lsp_helpers import alive, fake_dump, lsp_session, processes_in, python_minifying_with, until, uri
from lsprotocol import types

from minifier.contract.layout import DumpLayout
from minifier.contract.lock import DumpLock
from minifier.exchange.worklog import forked_by


@pytest.mark.slow
@pytest.mark.compile
async def test_a_killed_server_leaves_no_process_and_its_restart_shows_the_last_checkpoint(tmp_path, dumps):
    ws = tmp_path / "ws"
    # the general search alone (a guess of the failing kernel's nodes could win the first round: 12 -> 1), on one
    # worker: 12 nodes are halved, so the first checkpoint has several steps after it, each a compile of seconds
    launcher = dumps.get(str(ws / "a"), model="residual", blocks=2, bug="compile_error", reproduced=True)
    layout = DumpLayout.of(launcher)
    python = python_minifying_with(str(tmp_path / "python"), "--no-slice")
    async with lsp_session(str(ws), settings={"trusted": True, "workers": 1, "python": python}) as client:
        await until(lambda: client.state(launcher) == "reproduced", "discovery")
        failure_id = client.item(launcher)["id"]
        graph = client.item(launcher)["graphUri"]
        await client.command("aoti.minify", failure_id)
        [(start, now)] = await until(
            lambda: [tuple(map(int, m.groups())) for m in map(CHECKPOINT.match, client.refreshed(graph)) if m][:1],
            "the first checkpoint",
            timeout=400,
        )
        logs = glob.glob(os.path.join(layout.work, "worker-*.log"))
        [fork_server] = set().union(*(forked_by(open(log).read()) for log in logs))
        assert processes_in(str(tmp_path)) and alive(fork_server)
        client._server.kill()  # SIGKILL: no shutdown, no exit, nothing the server can do about it
        await client._server.wait()
    # the minifier cancels itself (repro.py from its best checkpoint), its workers and fork server go
    await until(lambda: not processes_in(str(tmp_path)) and not alive(fork_server), "no process left", timeout=15)

    async with lsp_session(str(ws), settings={"trusted": True}) as client:
        await until(lambda: client.item(launcher), "discovery after the restart")
        item = client.item(launcher)
        assert (item["state"], item["nodesStart"], item["nodesNow"]) == ("cancelled", start, now), item
        assert 1 < now < start
        assert item["message"].startswith(f"stopped earlier at {start} -> {now} nodes: repro.py holds the smallest")
        text = await client.content(item["graphUri"])
        assert text.startswith(f"# {start} -> {now} nodes") and "# cancelled: CppCompileError" in text
        assert text.count("torch.ops.aten.") == now
        [on_repro] = await until(lambda: client.diagnostics.get(uri(layout.repro_py)), "the repro.py diagnostic")
        assert on_repro.message.startswith(f"partial repro (minification cancelled): {now} nodes")
        assert not client.logged("aoti-lsp internal error")


CHECKPOINT = re.compile(r"# (\d+) -> (\d+) nodes")


async def test_a_dump_a_terminal_minifies_is_left_alone_followed_by_minify_and_refused_by_triage(tmp_path):
    """The editor's Minify during a terminal's minify follows that run instead of starting its own; a workaround
    search cannot share the dump, and says whose it is."""
    ws = str(tmp_path / "ws")
    launcher = fake_dump(ws, failure=False)
    with DumpLock(DumpLayout.of(launcher).lock) as lock:
        os.makedirs(os.path.dirname(lock.path), exist_ok=True)
        lock.acquire("minify")  # a terminal's `aoti-minify minify`, as far as anyone can tell
        async with lsp_session(ws, settings={"trusted": True, "keepWarm": 0}) as client:
            await until(
                lambda: client.logged(f"not reproduced in the background while pid {os.getpid()} "),
                "the background reproduction to be skipped",
            )
            # the failure list that says so is a notification of its own, which may follow the log line
            await until(lambda: client.state(launcher) == "found", "the failure listed as found, not reproducing")
            await client.command("aoti.minify", client.item(launcher)["id"])
            following = f"pid {os.getpid()} (aoti-minify minify, started "
            told = await until(
                lambda: [m.message for m in client.messages if following in m.message and "following it" in m.message],
                "the editor's minify to follow the terminal's",
            )
            assert "started outside the editor, is minifying it" in told[0]
            assert client.state(launcher) == "found" and not client.logged("started .* -m minifier minify")
            await client.command("aoti.triage", client.item(launcher)["id"])  # the real minifier: it stops at once
            await until(lambda: client.state(launcher) == "error", "the refusal")
            message = client.item(launcher)["message"]
            assert message.startswith(f"another aoti-minify works on this dump: pid {os.getpid()} (aoti-minify minify")
            assert any(f"pid {os.getpid()}" in m.message for m in client.messages if m.type == types.MessageType.Error)


async def test_symlink_loops_and_two_thousand_run_folders(tmp_path):
    """Discovery walks on, finds each dump once (a symlinked torch_compile_debug too), says nothing it
    cannot back, and the server still answers; the scan's time goes to bench/RESULTS.md (bench/soak.py)."""
    ws = tmp_path / "ws"
    many = [fake_dump(str(ws / "many"), run=f"run_{i:04d}-pid_{i}") for i in range(2000)]
    elsewhere = fake_dump(str(tmp_path / "scratch"), run="run_elsewhere-pid_1")
    os.makedirs(ws / "linked")
    os.symlink(tmp_path / "scratch" / "torch_compile_debug", ws / "linked" / "torch_compile_debug")
    os.symlink(ws, ws / "many" / "loop")  # a loop through the workspace root
    os.symlink("self", ws / "self")  # a link to itself
    run_loop = ws / "many" / "torch_compile_debug" / "run_loop-pid_0"
    os.symlink(run_loop, run_loop)
    started = time.monotonic()
    async with lsp_session(str(ws)) as client:  # untrusted: nothing runs
        await until(lambda: client.logged(r"scanned .*: 2001 failure\(s\)"), "the scan", timeout=300)
        items = await client.failures()
        print(f"\n2000 run folders: scanned and listed in {time.monotonic() - started:.1f} s")
        assert len(items) == 2001 and len({i["id"] for i in items}) == 2001
        linked = str(
            ws
            / "linked"
            / "torch_compile_debug"
            / os.path.relpath(elsewhere, tmp_path / "scratch" / "torch_compile_debug")
        )
        assert {i["launcher"] for i in items} == {uri(p) for p in [*many, linked]}
        assert "def forward" in await client.content(items[0]["graphUri"])
        assert not client.logged("internal error") and client.messages == []
    assert not re.search("Traceback", "".join(m.message for m in client.log_messages))
