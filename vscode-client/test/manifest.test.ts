// The manifest (root package.json) against the protocol and the tree's context values.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ClientCommands, Contexts, VIEW_ID } from '../src/manifest';
import { FAILURE_STATES, FileCommands, SERVER_COMMAND_IDS, type FailureState } from '../src/protocol';
import { contextValue } from '../src/presentation';

const root = join(__dirname, '..', '..');
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const contributes = manifest.contributes;

test('engines.vscode admits 1.100.3 and @types/vscode is not newer than it', () => {
  const m = /^\^1\.(\d+)\.\d+$/.exec(manifest.engines.vscode);
  assert.ok(m, manifest.engines.vscode);
  assert.ok(Number(m[1]) <= 100);
  const types = /^(\d+)\.(\d+)/.exec(manifest.devDependencies['@types/vscode']);
  assert.ok(types && Number(types[1]) === 1 && Number(types[2]) <= Number(m[1]));
});

test('vscode-languageclient >= 10.0.1 (workspace/textDocumentContent by default)', () => {
  const installed = JSON.parse(readFileSync(join(root, 'node_modules', 'vscode-languageclient', 'package.json'), 'utf8')).version as string;
  const [major, minor, patch] = installed.split('.').map(Number);
  assert.ok(major > 10 || (major === 10 && (minor > 0 || patch >= 1)), installed);
});

test('workspace trust: limited support, aoti.python restricted', () => {
  const trust = manifest.capabilities.untrustedWorkspaces;
  assert.equal(trust.supported, 'limited');
  assert.ok(trust.description.length > 20);
  assert.ok(trust.restrictedConfigurations.includes('aoti.python'));
});

test('every server and client command is declared with a title, and nothing else', () => {
  const declared = new Map<string, string>(contributes.commands.map((c: { command: string; title: string }) => [c.command, c.title]));
  const ours = [...SERVER_COMMAND_IDS, ...Object.values(FileCommands), ...Object.values(ClientCommands)];
  for (const id of ours) {
    assert.ok(declared.get(id), `${id} missing from contributes.commands`);
  }
  assert.deepEqual([...declared.keys()].sort(), [...ours].sort());
});

test('the when clauses use only the context keys the extension sets', () => {
  const clauses = Object.values(contributes.menus).flat().map((m) => (m as { when?: string }).when ?? '');
  const used = new Set(clauses.flatMap((w) => w.match(/\baoti\.[A-Za-z]+\b/g) ?? []).filter((key) => key !== VIEW_ID));
  assert.deepEqual([...used].sort(), Object.values(Contexts).sort());
});

test('the extension never registers the server commands itself', () => {
  const src = join(root, 'vscode-client', 'src');
  for (const file of readdirSync(src)) {
    const text = readFileSync(join(src, file), 'utf8');
    assert.doesNotMatch(text, /registerCommand\(\s*(ServerCommands\.|['"]aoti\.)/, file);
  }
});

test('settings contributed for every Settings key but trusted', () => {
  const props = Object.keys(contributes.configuration.properties).sort();
  assert.deepEqual(props, ['aoti.autoReproduce', 'aoti.captureCommand', 'aoti.debugDirRoots', 'aoti.devices', 'aoti.imports', 'aoti.keepWarm', 'aoti.python', 'aoti.timeout', 'aoti.workers']);
});

test("the extension's README lists every setting", () => {
  const readme = readFileSync(join(root, 'vscode-client', 'README.md'), 'utf8');
  const listed = [...readme.matchAll(/^\| `(aoti\.\w+)` \|/gm)].map((m) => m[1]).sort();
  assert.deepEqual(listed, Object.keys(contributes.configuration.properties).sort());
});

test('the failures view exists', () => {
  const views = Object.values(contributes.views).flat() as { id: string; name: string }[];
  assert.ok(views.some((v) => v.id === VIEW_ID && v.name === 'Inductor Failures'));
});

// Evaluate the `viewItem =~ /re/` part of each context-menu entry against our context values.
function menuCommands(state: FailureState, extra: { repro?: boolean; kernel?: boolean } = {}): Set<string> {
  const value = contextValue({ state, repro: extra.repro ? 'file:///r' : null, kernelUri: extra.kernel ? 'aoti:/k' : null });
  const shown = new Set<string>();
  for (const entry of contributes.menus['view/item/context'] as { command: string; when: string; group: string }[]) {
    assert.match(entry.when, new RegExp(`view == ${VIEW_ID.replace('.', '\\.')}`));
    const m = /viewItem =~ \/(.*)\/$/.exec(entry.when);
    assert.ok(m, entry.when);
    if (new RegExp(m[1]).test(value) && !entry.group.startsWith('inline')) shown.add(entry.command);
  }
  return shown;
}

test('context menu per state', () => {
  for (const state of FAILURE_STATES) {
    const shown = menuCommands(state);
    const running = state === 'reproducing' || state === 'minifying';
    assert.equal(shown.has('aoti.cancel'), running, `${state}: cancel`);
    assert.equal(shown.has('aoti.minify'), !running, `${state}: minify`);
    assert.equal(shown.has('aoti.reproduce'), !running, `${state}: reproduce`);
    assert.ok(shown.has('aoti.showGraph'), `${state}: graph`);
    assert.ok(!shown.has('aoti.openRepro'), `${state}: no repro yet`);
    assert.ok(!shown.has('aoti.showKernel'), `${state}: no kernel`);
  }
  assert.ok(menuCommands('minimized', { repro: true }).has('aoti.openRepro'));
  assert.ok(menuCommands('cancelled', { repro: true }).has('aoti.openRepro'));
  assert.ok(menuCommands('reproduced', { kernel: true }).has('aoti.showKernel'));
  assert.ok(menuCommands('minimized', { repro: true }).has('aoti.report'));
  assert.ok(!menuCommands('reproduced').has('aoti.report'), 'a report needs a repro');
  assert.ok(menuCommands('minimized', { repro: true }).has('aoti.versions'));
  assert.ok(!menuCommands('reproduced').has('aoti.versions'), 'checking releases needs a repro');
});

test('Capture is on a Python file\'s editor context menu, in a trusted workspace only', () => {
  const [entry] = contributes.menus['editor/context'] as { command: string; when: string }[];
  assert.equal(entry.command, FileCommands.capture);
  assert.match(entry.when, /resourceLangId == python/);
  assert.match(entry.when, /isWorkspaceTrusted/);
});
