"""The language server on real GPU failures (Triton), end to end. Skipped without CUDA.

One session over four dumps: PyTorch's dump of the seed's Triton compile_error and of its accuracy bug,
and two failures PyTorch cannot dump alone, captured with `aoti-minify capture` (a device-side assert,
and a user-written Triton kernel reading out of bounds). All four are minified at once in the background.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT
from lsp_helpers import lsp_session, until, uri
from lsprotocol import types

pytestmark = [pytest.mark.gpu, pytest.mark.compile]

PROGRAM = """
import torch
import torch._inductor.config as config
from minifier.examples.models import build
from minifier.examples.triton_ops import OutOfBounds
config.triton.inject_relu_bug_TESTING_ONLY = {bug}
torch.manual_seed(0)
model, inputs = {model}
model, inputs = model.cuda(), tuple(t.cuda() for t in inputs)
with torch.no_grad():
    compiled = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(
        torch.export.export(model, inputs)))
    compiled(*inputs)
    torch.cuda.synchronize()
"""
IMPORT = "minifier.examples.triton_ops"


def captured(folder, bug: str, model: str) -> str:
    os.makedirs(folder)
    script = os.path.join(folder, "train.py")
    with open(script, "w") as f:
        f.write(PROGRAM.format(bug=bug, model=model))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "minifier",
            "capture",
            "--dir",
            str(folder),
            "--import",
            IMPORT,
            "--",
            sys.executable,
            script,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    launchers = [ln.split("reproducing ", 1)[1] for ln in proc.stderr.splitlines() if "reproducing " in ln]
    failing = [p for p in launchers if os.path.exists(os.path.join(os.path.dirname(p), "failure.json"))]
    for other in {os.path.dirname(os.path.dirname(p)) for p in launchers} - {
        os.path.dirname(os.path.dirname(failing[-1]))
    }:
        shutil.rmtree(other)  # keep one failure per capture in the workspace
    for run in os.listdir(os.path.join(folder, "torch_compile_debug")):
        if ".capture" not in run:
            shutil.rmtree(os.path.join(folder, "torch_compile_debug", run))  # PyTorch's own, corrupt dump
    return failing[-1]


async def test_gpu_failures_through_the_language_server(tmp_path, dumps):
    ws = tmp_path / "ws"
    with ThreadPoolExecutor() as pool:  # four independent compiles: side by side, not one after another
        made = {
            "triton_compile_error": pool.submit(dumps.get, str(ws / "compile"), device="cuda"),
            "accuracy": pool.submit(dumps.get, str(ws / "accuracy"), bug="accuracy", device="cuda"),
            "device_assert": pool.submit(captured, ws / "assert", "'runtime_error'", "build('seed')"),
            "out_of_bounds": pool.submit(captured, ws / "oob", "None", "(OutOfBounds(), (torch.randn(8, 10),))"),
        }
    launchers = {name: future.result() for name, future in made.items()}
    settings = {"trusted": True, "workers": 4, "imports": [IMPORT]}
    async with lsp_session(str(ws), settings=settings) as client:
        for launcher in launchers.values():
            await until(
                lambda launcher=launcher: client.state(launcher) == "reproduced", f"{launcher} reproduced", timeout=400
            )
        items = {name: client.item(path) for name, path in launchers.items()}
        assert items["triton_compile_error"]["kind"] == "compile_error"
        assert items["accuracy"]["kind"] == "accuracy"
        assert "device-side assert" in items["device_assert"]["signature"]
        assert items["out_of_bounds"]["signature"].startswith("CUDAError: CUDA error: ")

        # the Triton kernel's failing line, in the real generated file and as a virtual document
        kernel_uri = items["triton_compile_error"]["kernelUri"]
        assert kernel_uri and re.fullmatch(r"aoti:/.+/kernels/triton_\w+\.py", kernel_uri)
        kernel_text = await client.content(kernel_uri)
        [(file_uri, [diagnostic])] = [
            (u, d) for u, d in client.diagnostics.items() if u.endswith(".py") and "torchinductor" in u and d
        ]
        assert "compile error!" in kernel_text.splitlines()[diagnostic.range.start.line]
        related = [r.location.uri for r in diagnostic.related_information or []]
        assert any(u.endswith("minifier/examples/models.py") for u in related)
        hover = await client.hover(file_uri, diagnostic.range.start.line)
        assert hover is not None and "relu" in hover.contents.value and "SyntaxError" in hover.contents.value

        for item in items.values():
            await client.command("aoti.minify", item["id"])
        for name, launcher in launchers.items():
            await until(
                lambda launcher=launcher: client.state(launcher) in ("minimized", "error"),
                f"{name} minimized",
                timeout=600,
            )
            item = client.item(launcher)
            assert item["state"] == "minimized", (name, item["message"])
            assert item["nodesNow"] == 1 and item["nodesStart"] > 1, (name, item)
            repro = os.path.join(os.path.dirname(launcher), "repro.py")
            [on_repro] = await until(lambda repro=repro: client.diagnostics.get(uri(repro)), f"{name} repro diagnostic")
            assert on_repro.severity == types.DiagnosticSeverity.Information
            assert on_repro.message.startswith("minimal repro: 1 node, reproduces ")
            # the graph document's refreshes, down to the one that shows the end (a fast minify's done
            # event overtakes the client's fetch of its last checkpoint's refresh)
            await client.refreshed_until(item["graphUri"], "minimized")
            nodes = client.minified_nodes(item["graphUri"])
            assert nodes and nodes[-1] == 1 and nodes == sorted(nodes, reverse=True), (name, nodes)
            assert [
                r
                for r in client.progress_reports.values()
                if r and getattr(r[0], "title", "") == f"Minifying {item['id']}"
            ]
        await client.command("aoti.openRepro", items["out_of_bounds"]["id"])
        oob_repro = uri(os.path.join(os.path.dirname(launchers["out_of_bounds"]), "repro.py"))
        await until(lambda: client.shown_documents and client.shown_documents[-1].uri == oob_repro, "repro shown")
