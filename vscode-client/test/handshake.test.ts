import assert from 'node:assert/strict';
import { test } from 'node:test';
import { describeServer, serverProtocol } from '../src/handshake';
import { CAPABILITY, PROTOCOL_VERSION } from '../src/protocol';

const serverInfo = { name: 'aoti-lsp', version: '0.1.0' };

test('the server announces its protocol version in capabilities.experimental', () => {
  const result = { serverInfo, capabilities: { experimental: { [CAPABILITY]: { protocolVersion: PROTOCOL_VERSION } } } };
  assert.equal(serverProtocol(result), PROTOCOL_VERSION);
  assert.deepEqual(describeServer(result), {
    text: `aoti-lsp 0.1.0 speaks protocol ${PROTOCOL_VERSION}; this extension speaks ${PROTOCOL_VERSION}`,
    mismatch: false,
  });
});

test('another version, or none, is a mismatch', () => {
  const newer = { serverInfo, capabilities: { experimental: { [CAPABILITY]: { protocolVersion: PROTOCOL_VERSION + 1 } } } };
  assert.equal(describeServer(newer).mismatch, true);
  assert.match(describeServer(newer).text, new RegExp(`speaks protocol ${PROTOCOL_VERSION + 1};`));
  for (const experimental of [undefined, {}, { [CAPABILITY]: { protocolVersion: '1' } }]) {
    const older = { capabilities: { experimental } };
    assert.equal(serverProtocol(older), undefined);
    assert.deepEqual(describeServer(older), {
      text: `the server announces no protocol version; this extension speaks ${PROTOCOL_VERSION}`,
      mismatch: true,
    });
  }
});
