import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clientExperimental, handshake, serverProtocol } from '../src/handshake';
import { CAPABILITY, PROTOCOL_VERSION } from '../src/protocol';

const serverInfo = { name: 'aoti-lsp', version: '0.1.0' };
const python = '/venv/bin/python';
const answer = (protocolVersion: unknown, packageVersion = '0.1.0') => ({
  serverInfo,
  capabilities: { experimental: { [CAPABILITY]: { protocolVersion, packageVersion } } },
});

test('the client announces its protocol version, keeping what else is experimental', () => {
  assert.deepEqual(clientExperimental(undefined), { [CAPABILITY]: { protocolVersion: PROTOCOL_VERSION } });
  assert.deepEqual(clientExperimental({ other: 1 }), { other: 1, [CAPABILITY]: { protocolVersion: PROTOCOL_VERSION } });
});

test('the same protocol: a log line, no notification', () => {
  assert.equal(serverProtocol(answer(PROTOCOL_VERSION)), PROTOCOL_VERSION);
  assert.deepEqual(handshake(answer(PROTOCOL_VERSION), '0.1.0', python), {
    text: `aoti-lsp 0.1.0 speaks protocol ${PROTOCOL_VERSION}; this extension (0.1.0) speaks ${PROTOCOL_VERSION}`,
    mismatch: false,
  });
});

test('an older server: one notification naming both versions and the command that installs the matching server', () => {
  const older = handshake(answer(PROTOCOL_VERSION - 1, '0.0.9'), '0.1.0', python);
  assert.equal(older.mismatch, true);
  assert.equal(older.fixCommand, '/venv/bin/python -m pip install aoti-lens==0.1.0');
  assert.equal(
    older.notification,
    `aoti-lens: the language server in /venv/bin/python (aoti-lens 0.0.9, protocol ${PROTOCOL_VERSION - 1}) does not match ` +
      `this extension (aoti-lens 0.1.0, protocol ${PROTOCOL_VERSION}). Install the matching server: /venv/bin/python -m pip install aoti-lens==0.1.0`,
  );
  for (const experimental of [undefined, {}, { [CAPABILITY]: { protocolVersion: '1' } }]) {
    const silent = handshake({ capabilities: { experimental } }, '0.1.0', python);
    assert.equal(silent.mismatch, true);
    assert.match(silent.notification ?? '', /aoti-lens unknown, protocol unknown \(older than 1\)/);
  }
});

test('a newer server: the same command, or update the extension', () => {
  const newer = handshake(answer(PROTOCOL_VERSION + 1, '0.3.0'), '0.1.0', "/my env/python");
  assert.equal(newer.mismatch, true);
  assert.equal(newer.fixCommand, "'/my env/python' -m pip install aoti-lens==0.1.0");
  assert.match(newer.notification ?? '', /aoti-lens 0\.3\.0, protocol \d+\).*\(or update the extension to aoti-lens 0\.3\.0\)$/);
});
