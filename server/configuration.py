"""Settings, pushed and pulled: `initializationOptions` and `workspace/didChangeConfiguration` push
them; where the client answers `workspace/configuration`, the server also pulls the `aoti` section
for the window and for each workspace folder (multi-root workspaces, and editors that only answer
pulls), on `initialized`, on every configuration change and when folders change.

Workspace trust is the window's: a folder's settings never change it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.uris import from_fs_path

from .feature import Feature
from .protocol import SETTINGS_SECTION, Settings

if TYPE_CHECKING:
    from .server import AotiLanguageServer

PULL_TIMEOUT = 10.0


class Configuration(Feature):
    def __init__(self, ls: AotiLanguageServer) -> None:
        super().__init__(ls)
        self.pushed = Settings()  # initializationOptions and didChangeConfiguration payloads, merged

    def register(self) -> None:
        ls = self.ls

        @ls.feature(types.INITIALIZE)
        def initialize(params: types.InitializeParams) -> None:
            self.pushed = self._merge(Settings(), params.initialization_options)
            ls.settings = self.pushed

        @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
        async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
            self.pushed = self._merge(self.pushed, params.settings)
            await self.update()

        @ls.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
        async def folders_changed(params: types.DidChangeWorkspaceFoldersParams) -> None:
            await self.update()  # discovery follows the new roots

    async def initialized(self) -> None:
        """Pull before the other features start: discovery needs every folder's debugDirRoots."""
        await self.update(notify=False)

    @property
    def supports_pull(self) -> bool:
        workspace = self.ls.client_capabilities.workspace
        return bool(workspace and workspace.configuration)

    async def update(self, notify: bool = True) -> None:
        """The window's and each folder's settings from what was pushed and what the client answers now."""
        ls = self.ls
        old = ls.settings
        window, folders = self.pushed, {}
        if self.supports_pull:
            answers = await self._pull(ls.folders())
            if answers is not None:
                window = self._merge(self.pushed, answers[0])
                folders = {
                    folder: dataclasses.replace(self._merge(window, answer), trusted=window.trusted)
                    for folder, answer in zip(ls.folders(), answers[1:])
                }
        ls.settings, ls.folder_settings = window, folders
        if notify:
            await ls.settings_changed(old)

    async def _pull(self, folders: list[str]) -> list[Any] | None:
        items = [types.ConfigurationItem(section=SETTINGS_SECTION)]
        items += [types.ConfigurationItem(scope_uri=from_fs_path(f) or f, section=SETTINGS_SECTION) for f in folders]
        try:
            answers = await asyncio.wait_for(
                self.ls.workspace_configuration_async(types.ConfigurationParams(items=items)), PULL_TIMEOUT
            )
        except Exception as e:  # the client refused or never answered: the pushed settings stand
            self.ls.log(
                f"workspace/configuration failed ({type(e).__name__}: {e}); using the pushed settings",
                types.MessageType.Warning,
            )
            return None
        if not isinstance(answers, (list, tuple)) or len(answers) != len(items):
            self.ls.log(
                f"workspace/configuration answered {answers!r} for {len(items)} items; using the pushed settings",
                types.MessageType.Warning,
            )
            return None
        return list(answers)

    def _merge(self, base: Settings, data: Any) -> Settings:
        merged, problems = base.merged(data)
        for problem in problems:
            self.ls.log(problem, types.MessageType.Warning)
        return merged


def folder_of(folders: list[str], path: str) -> str | None:
    """The innermost workspace folder holding `path`."""
    inside = [f for f in folders if path == f or path.startswith(f.rstrip(os.sep) + os.sep)]
    return max(inside, key=len) if inside else None
