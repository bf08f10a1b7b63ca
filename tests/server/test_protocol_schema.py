"""server/protocol.py is the one LSP schema: the client's protocol.ts and docs/protocol.md are generated
from it, package.json's contributed settings and commands agree with it, and the server announces its
version."""

from __future__ import annotations

import dataclasses
import json
import os

from lsp_helpers import ROOT, lsp_session
from server import codegen, protocol
from server.protocol import SERVER_COMMANDS, SETTINGS_SECTION, Settings, camel

MANIFEST = json.load(open(os.path.join(ROOT, "package.json")))
CONTRIBUTED = MANIFEST["contributes"]["configuration"]["properties"]
CLIENT_ONLY = {"trusted"}  # the client sets it from VS Code's workspace trust, it is no setting


def test_generated_files_are_up_to_date():
    assert [str(p.relative_to(codegen.ROOT)) for p in codegen.stale()] == [], "run: python -m server.codegen"


def test_every_setting_is_contributed_and_nothing_else():
    keys = {camel(f.name) for f in dataclasses.fields(Settings)} - CLIENT_ONLY
    assert set(CONTRIBUTED) == {f"{SETTINGS_SECTION}.{key}" for key in keys}
    restricted = MANIFEST["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"]
    assert set(restricted) <= set(CONTRIBUTED)


def test_package_json_defaults_are_the_server_defaults():
    """An unset VS Code setting sends package.json's default: the server must read it as its own."""
    for key, schema in CONTRIBUTED.items():
        name = key.removeprefix(f"{SETTINGS_SECTION}.")
        assert Settings().merged({name: schema["default"]}) == (Settings(), []), key


def test_contributed_server_commands_are_the_servers():
    contributed = {c["command"] for c in MANIFEST["contributes"]["commands"]}
    assert {c for c in contributed if c.startswith("aoti.")} == set(SERVER_COMMANDS)  # the client's: aoti-lens.*


async def test_the_server_announces_its_protocol_version(tmp_path):
    async with lsp_session(str(tmp_path)) as client:
        assert client.initialize_result is not None
        capabilities = client.initialize_result.capabilities
        assert capabilities.experimental == {protocol.CAPABILITY: {"protocolVersion": protocol.PROTOCOL_VERSION}}
        assert set(capabilities.execute_command_provider.commands) == set(SERVER_COMMANDS)
