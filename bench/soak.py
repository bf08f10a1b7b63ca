"""aoti-lsp over a long session, and over a big workspace. Prints tables; asserts nothing.

    python bench/soak.py [--failures 20] [--scan 2000] [--workers 2] [--keep DIR]

Soak: one server, `--failures` copies of PyTorch's dump of the seed model (CPU, injected C++ compile
error, reproduced beforehand), minified one after another through `aoti.minify`. The resident memory
(RSS) of the server and of the warm fork server that forks every minify's workers, and the aoti-lens
processes alive, after each minify (2: the server and the fork server), and once the server has shut
down (none).
Scan: a workspace of `--scan` copies of that dump, untrusted (nothing runs): how long from the
server's start to the end of its scan, and to the first complete failure list.
Needs torch and g++ (the dump and the minifies are real); about 20 s a minify on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402
from pygls.uris import from_fs_path  # noqa: E402

from minifier.contract.artifacts import relocate_dump  # noqa: E402
from minifier.contract.procs import SERVER_NAME  # noqa: E402
from minifier.exchange.worklog import forked_by, logs_under  # noqa: E402

SERVER = [sys.executable, "-m", "server", "--stdio"]


def make_dump(folder: str) -> str:
    dump = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", folder, "--model", "seed"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    launcher = dump.stdout.strip().splitlines()[-1]
    subprocess.run([sys.executable, "-m", "minifier", "run", launcher], capture_output=True, cwd=ROOT, check=True)
    return launcher


def copies(launcher: str, workspace: str, n: int) -> list[str]:
    return [relocate_dump(launcher, os.path.join(workspace, f"model{i:04d}"), f"run_{i:04d}-pid_{i}") for i in range(n)]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 1024


def ours(base: str, server: int) -> dict[int, str]:
    """The aoti-lens processes of this benchmark alive now, pid -> name: the server, what runs in its
    workspaces (drivers, workers, compilers), and the fork servers its workers' logs name (they run
    in /, so that a warm one pins no folder)."""
    fork_servers = set().union(*(forked_by(open(log, errors="replace").read()) for log in logs_under(base)))
    found = {}
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            cwd = os.readlink(f"/proc/{pid}/cwd")
            zombie = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and (pid == server or pid in fork_servers or cwd == base or cwd.startswith(base + os.sep)):
            found[pid] = comm
    return found


@dataclass
class Session:
    client: LanguageClient
    process_pid: int
    failures: list[dict[str, Any]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    scanned: float | None = None


async def start(workspace: str, settings: dict[str, Any]) -> Session:
    client = LanguageClient("aoti-lsp-soak", "1")
    session = Session(client, 0)

    @client.feature("aoti/failuresChanged")
    def failures_changed(params: Any) -> None:
        session.failures = [item._asdict() if hasattr(item, "_asdict") else item for item in params.failures]

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def log(params: types.LogMessageParams) -> None:
        session.logs.append(params.message)
        if params.message.startswith("scanned ") and session.scanned is None:
            session.scanned = time.perf_counter()

    @client.feature(types.WORKSPACE_TEXT_DOCUMENT_CONTENT_REFRESH)
    def refresh(params: types.TextDocumentContentRefreshParams) -> None:
        asyncio.get_running_loop().create_task(
            client.workspace_text_document_content_async(types.TextDocumentContentParams(uri=params.uri))
        )

    for method in (types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, types.WINDOW_SHOW_MESSAGE):
        client.feature(method)(lambda params: None)
    await client.start_io(*SERVER)
    session.process_pid = client._server.pid
    capabilities = types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(text_document_content=types.TextDocumentContentClientCapabilities())
    )
    await client.initialize_async(
        types.InitializeParams(
            capabilities=capabilities,
            root_uri=from_fs_path(workspace),
            initialization_options=settings,
            workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(workspace) or workspace, name="soak")],
        )
    )
    client.initialized(types.InitializedParams())
    return session


async def stop(session: Session) -> None:
    await session.client.shutdown_async(None)
    session.client.exit(None)
    await session.client.stop()


async def until(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("gave up waiting")
        await asyncio.sleep(0.1)


def state(session: Session, launcher: str) -> str | None:
    wanted = from_fs_path(launcher)
    return next((i["state"] for i in session.failures if i["launcher"] == wanted), None)


async def soak(launcher: str, workspace: str, n: int, workers: int) -> None:
    base = os.path.realpath(workspace)
    launchers = copies(launcher, workspace, n)
    session = await start(workspace, {"trusted": True, "workers": workers})
    await until(lambda: all(state(session, p) == "reproduced" for p in launchers), 120)
    await asyncio.sleep(2)  # the warm-up discovery asks for, under way
    server_start = rss_mib(session.process_pid)
    rows, fork_server = [], None
    for i, path in enumerate(launchers):
        failure_id = next(f["id"] for f in session.failures if f["launcher"] == from_fs_path(path))
        began = time.perf_counter()
        await session.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="aoti.minify", arguments=[failure_id])
        )
        await until(lambda path=path: state(session, path) in ("minimized", "error"), 600)
        seconds = time.perf_counter() - began
        with contextlib.suppress(TimeoutError):  # the driver and its workers end: the server and fork server stay
            await until(lambda: len(ours(base, session.process_pid)) <= 2, 15)
        processes = ours(base, session.process_pid)
        fork_server = fork_server or next((pid for pid, name in processes.items() if name == SERVER_NAME), None)
        rows.append(
            (
                i + 1,
                state(session, path),
                seconds,
                rss_mib(session.process_pid),
                rss_mib(fork_server) if fork_server else float("nan"),
                len(processes),
            )
        )
        print(
            f"{rows[-1][0]:>3} {rows[-1][1]:<10} {seconds:6.1f} s  server {rows[-1][3]:6.1f} MiB  "
            f"fork server {rows[-1][4]:6.1f} MiB  aoti-lens processes left {rows[-1][5]}",
            flush=True,
        )
    await stop(session)
    await asyncio.sleep(3)
    left = ours(base, session.process_pid)
    print(
        f"\nsoak: {n} minifies one after another in one session, {workers} workers each "
        f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    )
    print("| | after discovery | after minify 1 | after minify " + f"{n} |\n| --- | --- | --- | --- |")
    print(f"| server RSS | {server_start:.1f} MiB | {rows[0][3]:.1f} MiB | {rows[-1][3]:.1f} MiB |")
    print(f"| fork server RSS | - | {rows[0][4]:.1f} MiB | {rows[-1][4]:.1f} MiB |")
    print(
        f"| minify time | - | {rows[0][2]:.1f} s | {rows[-1][2]:.1f} s "
        f"(median {sorted(r[2] for r in rows)[len(rows) // 2]:.1f} s) |"
    )
    print(f"states: {sorted({r[1] for r in rows})}; aoti-lens processes 3 s after shutdown: {left or 'none'}")


async def scan(launcher: str, workspace: str, n: int) -> None:
    made = time.perf_counter()
    launchers = copies(launcher, workspace, n)
    print(f"\nscan: {n} run folders (copies of one real dump) made in {time.perf_counter() - made:.1f} s")
    began = time.perf_counter()
    session = await start(workspace, {"trusted": False})
    await until(lambda: len(session.failures) == n and session.scanned is not None, 600)
    listed = time.perf_counter()
    served = time.perf_counter()
    await session.client.workspace_text_document_content_async(
        types.TextDocumentContentParams(uri=session.failures[0]["graphUri"])
    )
    answer = time.perf_counter() - served
    await stop(session)
    print(f"| run folders | start -> scan logged | start -> all {n} listed | a request after it |")
    print(
        f"| --- | --- | --- | --- |\n| {len(launchers)} | {session.scanned - began:.1f} s | "
        f"{listed - began:.1f} s | {answer * 1000:.0f} ms |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--failures", type=int, default=20, help="minifies in the soak (0: none)")
    parser.add_argument("--scan", type=int, default=2000, help="run folders in the scan (0: none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", help="make the workspaces here and keep them")
    args = parser.parse_args()
    base = args.keep or tempfile.mkdtemp(prefix="aoti-lsp-soak-")
    try:
        launcher = make_dump(os.path.join(base, "pristine"))
        if args.failures:
            asyncio.run(soak(launcher, os.path.join(base, "soak"), args.failures, args.workers))
        if args.scan:
            asyncio.run(scan(launcher, os.path.join(base, "scan"), args.scan))
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
