import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildSettings, configurationAnswer, expandVars, type ConfigReader } from '../src/settings';

function config(values: Record<string, unknown>): ConfigReader {
  return { get: <T>(key: string) => values[key] as T | undefined };
}

test('defaults: only trusted, python and autoReproduce are sent', () => {
  assert.deepEqual(buildSettings(config({}), '/venv/bin/python', false), {
    trusted: false,
    python: '/venv/bin/python',
    autoReproduce: true,
  });
});

test('trust is passed through as given', () => {
  assert.equal(buildSettings(config({}), undefined, true).trusted, true);
  assert.equal(buildSettings(config({}), undefined, false).trusted, false);
});

test('all settings map to the protocol Settings', () => {
  const s = buildSettings(
    config({ workers: 3, devices: ' 0, 1 ', timeout: 120, keepWarm: 0, debugDirRoots: ['/dumps', 'rel', '${workspaceFolder}/x', ''], imports: [' my_ops ', ''], autoReproduce: false }),
    'python3',
    true,
    { workspaceFolder: '/ws', home: '/home/u' },
  );
  assert.deepEqual(s, {
    trusted: true,
    python: 'python3',
    workers: 3,
    devices: '0,1',
    timeout: 120,
    keepWarm: 0,
    debugDirRoots: ['/dumps', 'rel', '/ws/x'], // the server resolves relative roots (tests/server: debugDirRoots)
    imports: ['my_ops'],
    autoReproduce: false,
  });
});

test('invalid values are left out so the server defaults apply', () => {
  const s = buildSettings(config({ workers: 0, timeout: -5, keepWarm: -1, devices: '   ', debugDirRoots: 'nope', imports: 'x', autoReproduce: 'yes' }), undefined, true);
  assert.deepEqual(s, { trusted: true, autoReproduce: true });
  assert.equal(buildSettings(config({ workers: 2.7 }), undefined, true).workers, 2);
  assert.equal(buildSettings(config({ workers: null, timeout: null }), undefined, true).workers, undefined);
});

test('expandVars expands ~, ${userHome} and ${workspaceFolder}', () => {
  const vars = { workspaceFolder: '/ws', home: '/home/u' };
  assert.equal(expandVars('~/venv/bin/python', vars), '/home/u/venv/bin/python');
  assert.equal(expandVars('${userHome}/p', vars), '/home/u/p');
  assert.equal(expandVars('${workspaceFolder}/.venv/bin/python', vars), '/ws/.venv/bin/python');
  assert.equal(expandVars(' python3 ', vars), 'python3');
  assert.equal(expandVars('${workspaceFolder}/p', { home: '/h' }), '${workspaceFolder}/p');
});

test('workspace/configuration: each item\'s aoti section is the Settings the extension sends for its scope', () => {
  const window = { trusted: true, python: '/venv/bin/python' };
  const folder = { trusted: true, python: '/b/.venv/bin/python', workers: 3 };
  const items = [{ section: 'aoti' }, { section: 'aoti', scopeUri: 'file:///b' }, { section: 'other' }, {}];
  const answer = configurationAnswer([{ python: '' }, { python: '' }, { other: 1 }, { editor: {} }], items, [window, folder, window, window]);
  assert.deepEqual(answer, [window, folder, { other: 1 }, { editor: {}, aoti: window }]);
  assert.equal(configurationAnswer(null, [{ section: 'aoti' }], [window]), null);
});
