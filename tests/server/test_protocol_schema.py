"""server/protocol.py is the one LSP schema: the client's protocol.ts and docs/protocol.md are generated
from it, package.json's contributed settings and commands agree with it, and the server announces its
version."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest
from lsp_helpers import ROOT, lsp_session, until, vscode_capabilities

from server import __version__, codegen, protocol
from server.protocol import FILE_COMMANDS, PROTOCOL_VERSION, SERVER_COMMANDS, SETTINGS_SECTION, Settings, camel

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
    assert {c for c in contributed if c.startswith("aoti.")} == set(
        SERVER_COMMANDS + FILE_COMMANDS
    )  # the client's: aoti-lens.*


@pytest.mark.parametrize("client", [PROTOCOL_VERSION, PROTOCOL_VERSION - 1, PROTOCOL_VERSION + 1, None])
async def test_version_handshake_both_ways(tmp_path, client):
    """The client announces its protocol version (another editor announces none); the server answers
    with its own and its package version whatever it heard, and says in its log when they differ."""
    capabilities = vscode_capabilities(client)
    async with lsp_session(str(tmp_path), capabilities=capabilities) as client_session:
        result = client_session.initialize_result
        assert result is not None and result.server_info.version == __version__
        assert result.capabilities.experimental == {
            protocol.CAPABILITY: {
                "protocolVersion": PROTOCOL_VERSION,
                "packageVersion": __version__,
                "clientProtocolVersion": client,
            }
        }
        assert set(result.capabilities.execute_command_provider.commands) == set(SERVER_COMMANDS + FILE_COMMANDS)
        await until(lambda: client_session.logged(r"^scanned "), "the first scan")
        mismatch = client_session.logged(
            rf"client speaks aoti-lens protocol {client}, this server "
            rf"\({re.escape(__version__)}\) {PROTOCOL_VERSION}"
        )
        assert bool(mismatch) == (client not in (None, PROTOCOL_VERSION))
