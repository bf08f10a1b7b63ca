"""Capture from the editor: run a script (or settings.captureCommand) under `aoti-minify capture`, so
that its AOTI failures are dumped even when PyTorch cannot dump them itself (a device-side assert
poisons the process first), into the script's workspace folder where discovery finds them as they
appear.

Offered as a code lens and a code action on each line of a Python file that calls
`aoti_compile_and_package` / `aoti_load_package`, or, in a script that makes no such call, `torch.compile`
(captured with `--compiler torch.compile`: one capture turns on one compiler's dumps, and torch.compile's
break AOTI compiles in the same process). `aoti/captureCommand` gives a client the command
line to run in a terminal (the VS Code client does); the `aoti.capture` command runs it here in the
background for other editors. Either way only in a trusted workspace: the script is workspace code.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.uris import from_fs_path, to_fs_path

from minifier.contract.procs import exit_text, signal_group, with_this_package

from .configuration import folder_of
from .feature import Feature
from .protocol import CAPTURE, CAPTURE_COMMAND, UNTRUSTED, CaptureCommand, CaptureParams, plain_json, to_json

if TYPE_CHECKING:
    from .server import AotiLanguageServer

TITLES = {
    "aoti": "Capture AOTI failures of this script",
    "torch.compile": "Capture torch.compile failures of this script",
}
REQUEST_FAILED = -32803  # LSP's RequestFailed
_CODE = r"^(?!\s*(#|def\s|import\s|from\s)).*"
_CALLS = {
    "aoti": re.compile(_CODE + r"\baoti_(compile_and_package|load_package)\s*\("),
    "torch.compile": re.compile(_CODE + r"\btorch\.compile\s*\("),
}


def compiling_lines(text: str) -> tuple[str, list[int]]:
    """Whose failures a capture of this script dumps (AOTI's, where it makes an AOTI call), and the (0-based) lines
    that make that compiler's calls."""
    lines = text.splitlines()
    for compiler, call in _CALLS.items():
        found = [i for i, line in enumerate(lines) if call.search(line)]
        if found:
            return compiler, found
    return "aoti", []


def command_line(ls: AotiLanguageServer, script: str) -> CaptureCommand:
    settings = ls.settings_for(script)
    folder = folder_of(ls.folders(), script) or os.path.dirname(script)
    if settings.capture_command:
        program = shlex.split(settings.capture_command.replace("${file}", shlex.quote(script)))
    else:
        program = [settings.python, script]
    imports = [arg for module in settings.imports for arg in ("--import", module)]
    compiler, _ = _calls_in(ls, from_fs_path(script) or script)
    which = ["--compiler", compiler] if compiler != "aoti" else []
    argv = [settings.python, "-m", "minifier", "capture", "--dir", folder, *which, *imports, "--", *program]
    return CaptureCommand(argv=tuple(argv), cwd=folder, title=f"aoti-lens capture: {os.path.basename(script)}")


def capture_actions(ls: AotiLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    lines = set(range(params.range.start.line, params.range.end.line + 1))
    compiler, calls = _calls_in(ls, params.text_document.uri)
    if not lines & set(calls):
        return []
    command = types.Command(title=TITLES[compiler], command=CAPTURE, arguments=[params.text_document.uri])
    return [types.CodeAction(title=TITLES[compiler], kind=types.CodeActionKind.Empty, command=command)]


def _calls_in(ls: AotiLanguageServer, uri: str) -> tuple[str, list[int]]:
    if not uri.endswith(".py") or not to_fs_path(uri):
        return "aoti", []
    try:
        return compiling_lines(ls.workspace.get_text_document(uri).source)
    except (OSError, UnicodeDecodeError):
        return "aoti", []


class Capture(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self._running: dict[str, asyncio.subprocess.Process] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def register(self) -> None:
        ls = self.ls

        @ls.feature(types.TEXT_DOCUMENT_CODE_LENS)
        def code_lens(params: types.CodeLensParams) -> list[types.CodeLens]:
            uri = params.text_document.uri
            compiler, calls = _calls_in(ls, uri)
            return [
                types.CodeLens(
                    range=types.Range(
                        start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)
                    ),
                    command=types.Command(title=TITLES[compiler], command=CAPTURE, arguments=[uri]),
                )
                for line in calls
            ]

        @ls.feature(CAPTURE_COMMAND)
        def capture_command(params: Any) -> dict[str, Any]:
            request = CaptureParams(**plain_json(params))
            if not ls.settings.trusted:
                raise JsonRpcException(code=REQUEST_FAILED, message=UNTRUSTED)
            return to_json(command_line(ls, self._script(request.uri)))

        @ls.command(CAPTURE)
        def capture(uri: str) -> None:
            if not ls.settings.trusted:
                ls.tell(UNTRUSTED)
                return
            script = self._script(uri)
            if script in self._running:
                ls.tell(f"{os.path.basename(script)} is being captured already", types.MessageType.Info)
                return
            task = asyncio.create_task(self._run(script, command_line(ls, script)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _script(self, uri: str) -> str:
        path = to_fs_path(uri)
        if not path or not os.path.isfile(path):
            raise JsonRpcException(code=REQUEST_FAILED, message=f"no such script: {uri}")
        return os.path.abspath(path)

    async def _run(self, script: str, command: CaptureCommand) -> None:
        ls = self.ls
        try:
            process = await asyncio.create_subprocess_exec(
                *command.argv,
                cwd=command.cwd,
                env=with_this_package(os.environ),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            ls.tell(f"aoti-lens cannot start {command.argv[0]}: {e.strerror or e}", types.MessageType.Error)
            return
        self._running[script] = process
        ls.log(f"capturing {script}: {shlex.join(command.argv)} (pid {process.pid})")
        ls.tell(
            f"aoti-lens: capturing the failures of {os.path.basename(script)}; they appear as they are dumped",
            types.MessageType.Info,
        )
        assert process.stdout is not None
        try:
            async for line in process.stdout:
                ls.log(
                    f"capture {os.path.basename(script)}: {line.decode('utf-8', 'replace').rstrip()}",
                    types.MessageType.Log,
                )
            code = await process.wait()
        finally:
            del self._running[script]
        ls.tell(f"aoti-lens: the capture of {os.path.basename(script)} {exit_text(code)}", types.MessageType.Info)
        await ls.discovery.rescan()

    async def shutdown(self) -> None:
        for process in self._running.values():
            signal_group(process.pid, signal.SIGTERM)

    def exit(self) -> None:
        for process in self._running.values():
            signal_group(process.pid, signal.SIGKILL)
