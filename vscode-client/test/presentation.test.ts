import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FAILURE_STATES } from '../src/protocol';
import { candidatesFor, commandArguments, contextValue, describeFailure, nodeCount, statusText } from '../src/presentation';
import { failure } from './fixtures';

test('node counts', () => {
  assert.equal(nodeCount({ nodesStart: null, nodesNow: null }), '');
  assert.equal(nodeCount({ nodesStart: 73, nodesNow: null }), '73 nodes');
  assert.equal(nodeCount({ nodesStart: 73, nodesNow: 12 }), '73 -> 12 nodes');
  assert.equal(nodeCount({ nodesStart: 73, nodesNow: 1 }), '73 -> 1 node');
  assert.equal(nodeCount({ nodesStart: 5, nodesNow: 5 }), '5 nodes');
});

test('tree item per state: label, description, icon, context value', () => {
  const expected: Record<string, [string, string]> = {
    found: ['found', 'bug'],
    reproducing: ['reproducing…', 'sync~spin'],
    reproduced: ['reproduced', 'error'],
    minifying: ['minifying… · 73 -> 12 nodes', 'sync~spin'],
    minimized: ['minimized · 73 -> 12 nodes', 'pass'],
    cancelled: ['cancelled · 73 -> 12 nodes', 'circle-slash'],
    error: ['error', 'warning'],
  };
  for (const state of FAILURE_STATES) {
    const counted = ['minifying', 'minimized', 'cancelled'].includes(state);
    const look = describeFailure(failure(state, counted ? { nodesStart: 73, nodesNow: 12 } : {}));
    assert.equal(look.label, "CppCompileError: 'compile' was not declared in this scope");
    assert.equal(look.description, expected[state][0], state);
    assert.equal(look.icon, expected[state][1], state);
    assert.equal(look.contextValue, `aoti.failure.${state}`);
  }
});

test('a minification that removed nothing is not called minimized', () => {
  const look = describeFailure(failure('minimized', { nodesStart: 35, nodesNow: 35 }));
  assert.equal(look.description, 'nothing removed · 35 nodes');
  assert.match(look.tooltip, /State: nothing removed \(35 nodes\)/);
});

test('label falls back, tooltip carries the details', () => {
  const look = describeFailure(failure('error', { label: '', signature: null, message: 'launcher is corrupt', queries: 9, seconds: 41.2 }));
  assert.equal(look.label, 'AOTI failure');
  assert.match(look.tooltip, /launcher is corrupt/);
  assert.match(look.tooltip, /9 queries, 41 s/);
});

test('a torch.compile failure says so in its label, description and tooltip', () => {
  const compiled = failure('found', { label: '', signature: null, compiler: 'torch.compile' });
  const look = describeFailure(compiled);
  assert.equal(look.label, 'torch.compile failure');
  assert.match(look.description, /torch\.compile/);
  assert.match(look.tooltip, /Compiled by: `torch\.compile`/);
  assert.doesNotMatch(describeFailure(failure('found')).description, /torch\.compile/);
});

test('context value flags repro and kernel', () => {
  assert.equal(contextValue({ state: 'minimized', repro: 'file:///r/repro.py', kernelUri: 'aoti:/x/kernels/k.py' }), 'aoti.failure.minimized.repro.kernel');
  assert.equal(contextValue({ state: 'reproduced', repro: null, kernelUri: 'aoti:/x/kernels/k.py' }), 'aoti.failure.reproduced.kernel');
});

test('status bar only while jobs run', () => {
  assert.equal(statusText([failure('found'), failure('minimized')]), null);
  assert.equal(statusText([failure('minifying', { nodesStart: 73, nodesNow: 12 })])?.text, '$(sync~spin) AOTI: minifying 73 -> 12');
  assert.equal(statusText([failure('minifying', { nodesStart: 73 })])?.text, '$(sync~spin) AOTI: minifying 73 nodes');
  assert.equal(statusText([failure('reproducing')])?.text, '$(sync~spin) AOTI: reproducing');
  assert.match(statusText([failure('reproducing')])?.tooltip ?? '', /Click to cancel/);
  assert.equal(statusText([failure('reproducing'), failure('minifying')])?.text, '$(sync~spin) AOTI: 2 jobs');
});

test('command arguments: tree element -> id, id kept, palette -> ask', () => {
  const f = failure('found');
  assert.deepEqual(commandArguments('aoti.minify', [f]), [f.id]);
  assert.deepEqual(commandArguments('aoti.minify', [f, [f]]), [f.id]);
  assert.deepEqual(commandArguments('aoti.cancel', ['run_1', 'extra']), ['run_1']);
  assert.deepEqual(commandArguments('aoti.cancel', ['run_1']), ['run_1']);
  assert.equal(commandArguments('aoti.showGraph', []), null);
  assert.equal(commandArguments('aoti.showGraph', [undefined]), null);
  assert.deepEqual(commandArguments('other.command', [1, 2]), [1, 2]);
});

test('which failures a palette command offers', () => {
  const all = [
    failure('found', { id: 'a' }),
    failure('minifying', { id: 'b' }),
    failure('minimized', { id: 'c', repro: 'file:///c/repro.py', kernelUri: 'aoti:/c/kernels/k.py' }),
  ];
  const ids = (cmd: string) => candidatesFor(cmd, all).map((f) => f.id);
  assert.deepEqual(ids('aoti.cancel'), ['b']);
  assert.deepEqual(ids('aoti.openRepro'), ['c']);
  assert.deepEqual(ids('aoti.showKernel'), ['c']);
  assert.deepEqual(ids('aoti.minify'), ['a', 'c']);
  assert.deepEqual(ids('aoti.showGraph'), ['a', 'b', 'c']);
});
