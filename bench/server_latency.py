"""aoti-lsp latency over a real dump: start-up (process start -> initialize result, and -> first
diagnostic), hover on the failing kernel line (real file and `aoti:` document), and graph.py
content. Prints a table; asserts nothing.

    python bench/server_latency.py [--workspace DIR] [--starts 10] [--hovers 100]

Without --workspace it makes one: PyTorch dumps the seed model's failure and `aoti-minify run`
reproduces it (needs torch and g++; about 30 s on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path

from minifier.contract.events import load_failure
from minifier.contract.layout import FAILURE_JSON, MINIFIER, DumpLayout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = [sys.executable, "-m", "server", "--stdio"]


@dataclass
class Samples:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, metric: str, seconds: float) -> None:
        self.values.setdefault(metric, []).append(seconds * 1000)

    def table(self) -> str:
        rows = [f"{'metric':<44} {'n':>4} {'min':>8} {'median':>8} {'p90':>8} {'max':>8}  (ms)"]
        for metric, ms in self.values.items():
            ordered = sorted(ms)
            p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
            rows.append(
                f"{metric:<44} {len(ms):>4} {ordered[0]:>8.1f} {statistics.median(ms):>8.1f} "
                f"{p90:>8.1f} {ordered[-1]:>8.1f}"
            )
        return "\n".join(rows)


def make_workspace() -> str:
    workspace = tempfile.mkdtemp(prefix="aoti-lsp-bench-")
    dump = subprocess.run(
        [sys.executable, "-m", "minifier.examples.dump", "--out", workspace, "--model", "seed"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    launcher = dump.stdout.strip().splitlines()[-1]
    subprocess.run([sys.executable, "-m", "minifier", "run", launcher], capture_output=True, cwd=ROOT, check=True)
    return workspace


def find_failure_json(workspace: str) -> str:
    for folder, _, files in os.walk(workspace):
        if FAILURE_JSON in files and os.path.basename(folder) == MINIFIER:
            return os.path.join(folder, FAILURE_JSON)
    raise SystemExit(f"no reproduced failure ({MINIFIER}/{FAILURE_JSON}) under {workspace}")


async def start(workspace: str, kernel_uri: str, samples: Samples) -> LanguageClient:
    client = LanguageClient("aoti-lsp-bench", "1")
    diagnosed = asyncio.get_running_loop().create_future()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def diagnostics(params: types.PublishDiagnosticsParams) -> None:
        if params.uri == kernel_uri and params.diagnostics and not diagnosed.done():
            diagnosed.set_result(time.perf_counter())

    for method in (types.WINDOW_LOG_MESSAGE, "aoti/failuresChanged"):
        client.feature(method)(lambda params: None)
    began = time.perf_counter()
    await client.start_io(*SERVER)
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=from_fs_path(workspace),
            workspace_folders=[types.WorkspaceFolder(uri=from_fs_path(workspace) or workspace, name="bench")],
        )
    )
    samples.add("start -> initialize result", time.perf_counter() - began)
    client.initialized(types.InitializedParams())
    samples.add("start -> kernel diagnostic (discovery)", await asyncio.wait_for(diagnosed, 60) - began)
    return client


async def stop(client: LanguageClient) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def measure(workspace: str, starts: int, hovers: int) -> Samples:
    failure_json = find_failure_json(workspace)
    failure = load_failure(failure_json)
    kernel = failure.kernel
    assert kernel and kernel.file and kernel.line, "the failure names no kernel line"
    samples = Samples()
    kernel_uri = from_fs_path(kernel.file) or kernel.file
    for _ in range(starts - 1):
        await stop(await start(workspace, kernel_uri, samples))
    client = await start(workspace, kernel_uri, samples)
    run_id = DumpLayout.of(failure.launcher).run_name
    virtual = f"aoti:/{run_id}/kernels/{kernel.name}.py"
    for doc, metric in ((kernel_uri, "hover, kernel line (real file)"), (virtual, "hover, kernel line (aoti: doc)")):
        for _ in range(hovers):
            began = time.perf_counter()
            hover = await client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=doc),
                    position=types.Position(line=kernel.line - 1, character=0),
                )
            )
            samples.add(metric, time.perf_counter() - began)
            assert hover is not None, f"no hover on {doc}"
    for _ in range(hovers):
        began = time.perf_counter()
        await client.workspace_text_document_content_async(
            types.TextDocumentContentParams(uri=f"aoti:/{run_id}/graph.py")
        )
        samples.add("textDocumentContent graph.py", time.perf_counter() - began)
    await stop(client)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", help="folder holding a reproduced torch_compile_debug dump")
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--hovers", type=int, default=100)
    args = parser.parse_args()
    workspace = os.path.abspath(args.workspace) if args.workspace else make_workspace()
    samples = asyncio.run(measure(workspace, max(1, args.starts), max(1, args.hovers)))
    print(f"aoti-lsp latency over {workspace} (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    print(samples.table())


if __name__ == "__main__":
    main()
