// End-to-end: the built .vsix in a real VS Code (code-server 4.100.3) driven in Debian's Chromium,
// on a workspace holding a real CPU AOTI failure. Screenshots of each step go to .artifacts/e2e/.
//   bash .ci/e2e-setup.sh && npm run test:e2e
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import * as h from './harness.mjs';

const MINIFY_TIMEOUT = Number(process.env.AOTI_E2E_MINIFY_TIMEOUT || 300) * 1000;
const SIGNATURE = /CppCompileError|not declared/;

let browser;

before(async () => {
  h.checkPrerequisites();
  rmSync(h.ARTIFACTS, { recursive: true, force: true });
  h.buildVsix();
  browser = await h.launchBrowser();
});

after(async () => {
  await browser?.close();
});

/** "73 -> 58 -> 12 nodes" / "73 nodes" in a graph document's header: the chain of node counts. */
function nodeChain(text) {
  const m = /(\d+)((?:\s*->\s*\d+)*)\s+nodes?\b/.exec(text.replace(/\u00a0/g, ' '));
  return m ? m[0].match(/\d+/g).map(Number) : null;
}

async function openFailuresView(page) {
  await page.locator('.activitybar .action-item a[aria-label="aoti-lens"], .activitybar .action-item .action-label[aria-label="aoti-lens"]').first().click();
  await page.locator('.pane-header[aria-label*="Inductor Failures"]').first().waitFor({ state: 'attached', timeout: 20_000 });
  // Widen the side bar (drag its sash) so the screenshots show the whole row: label, state, node count.
  const box = await page.locator('.part.sidebar').first().boundingBox();
  if (box && box.width < 600) {
    const x = box.x + box.width + 1;
    const y = box.y + box.height / 2;
    await page.mouse.move(x, y);
    await page.mouse.down();
    await page.mouse.move(x + 300, y, { steps: 10 });
    await page.mouse.up();
  }
}

async function contextAction(page, rowText, action) {
  const row = h.treeRow(page, rowText);
  await row.click({ button: 'right' });
  await h.clickMenuItem(page, action);
}

async function openProblems(page) {
  await page.keyboard.press('Escape');
  await page.keyboard.press('Control+Shift+M');
  await page.locator('.markers-panel').first().waitFor({ timeout: 10_000 });
}

async function graphDocument(page, rowText, accept = () => true) {
  await contextAction(page, rowText, 'Open shrinking graph');
  await h.until('graph.py to open', async () => /graph\.py/.test(await h.activeTabTitle(page)), { timeout: 30_000 });
  return h.until('the graph document to show the expected node count', async () => {
    const text = await h.activeEditorText(page);
    const chain = nodeChain(text);
    return chain && accept(chain) ? { text, chain } : null;
  }, { timeout: 30_000 });
}

// A page on a started code-server. A passing test removes its workspace and logs; a failing one leaves
// both, with a screenshot, for a look. They are removed only once code-server and what it started have
// stopped: code-server still writing its user data made the removal fail (ENOTEMPTY) after a test passed.
async function inWorkbench(ws, cs, label, body) {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  let passed = false;
  try {
    await body(page);
    passed = true;
  } catch (e) {
    await h.shot(page, `failed-${label}`).catch(() => undefined);
    h.log(`kept for a look: ${ws}, code-server log ${cs.logFile}`);
    throw e;
  } finally {
    await page.close();
    await cs.stop();
    if (passed) {
      cs.cleanup();
      rmSync(ws, { recursive: true, force: true });
    }
  }
}

test('tree, kernel diagnostic, minify from the tree, repro.py from Problems, shrinking graph', { timeout: 20 * 60_000 }, async () => {
  const dump = h.makeWorkspace('main');
  const cs = await h.startCodeServer(dump.ws, { settings: { 'aoti.python': h.PYTHON, 'aoti.workers': 2 } });
  await inWorkbench(dump.ws, cs, 'main', async (page) => {
    await h.openWorkbench(page, cs.folderUrl);

    // 1. The Inductor Failures tree lists the failure with its signature.
    await openFailuresView(page);
    const row = await h.until('the Inductor Failures tree to list the failure', async () => (await h.treeRows(page)).find((t) => SIGNATURE.test(t)), { timeout: 90_000 });
    h.log(`tree row: ${JSON.stringify(row)}`);
    await h.shot(page, '01-tree');

    // 2. The Problems panel shows the diagnostic on the failing C++ kernel line.
    await openProblems(page);
    const problems = await h.until('a kernel-line diagnostic in Problems', async () => {
      const rows = await h.problemRows(page);
      return rows.some((r) => /\.cpp\b/.test(r)) && rows.some((r) => SIGNATURE.test(r)) ? rows : null;
    }, { timeout: 60_000 });
    h.log(`problems: ${JSON.stringify(problems)}`);
    await h.shot(page, '02-problems');

    // 3. The shrinking graph before minifying: its starting node count.
    const before = await graphDocument(page, 'CppCompileError');
    const startNodes = before.chain[0];
    h.log(`graph before: ${before.chain.join(' -> ')} nodes`);
    await h.shot(page, '03-graph-before');

    // 4. Minify from the tree's context menu; the status bar shows the job.
    await contextAction(page, 'CppCompileError', 'Minify');
    const status = page.locator('.statusbar-item', { hasText: 'AOTI:' }).first();
    await h.until('the tree or status bar to show the job', async () => {
      const rows = await h.treeRows(page);
      return rows.some((r) => /minifying|minimized/.test(r)) || (await status.isVisible().catch(() => false));
    }, { timeout: 60_000 });
    await h.shot(page, '04-minifying');
    const done = await h.until('the failure to be minimized', async () => {
      const rows = await h.treeRows(page);
      const failed = rows.find((r) => /\berror\b/.test(r) && !SIGNATURE.test(r));
      if (failed) throw new Error(`job failed: ${failed}`);
      return rows.find((r) => /minimized/.test(r));
    }, { timeout: MINIFY_TIMEOUT, interval: 2000 });
    h.log(`tree row after: ${JSON.stringify(done)}`);
    assert.ok(existsSync(join(dump.minifierDir, 'repro.py')), 'repro.py written next to the launcher');

    // 5. repro.py opens from its Problems-panel row.
    await openProblems(page);
    const reproRow = page.locator('.markers-panel .monaco-list-row', { hasText: /minimal repro/ }).first();
    await reproRow.waitFor({ timeout: 60_000 });
    await reproRow.click();
    await h.until('repro.py to be the active editor', async () => /repro\.py/.test(await h.activeTabTitle(page)), { timeout: 30_000 });
    // The tab shows before the editor renders its lines: wait for the text rather than read it once.
    await h.until('repro.py\'s text to show', async () =>
      /import torch/.test((await h.activeEditorText(page)).replace(/\u00a0/g, ' ')), { timeout: 30_000 });
    await h.shot(page, '05-repro-from-problems');

    // 6. The shrinking graph now shows fewer nodes than it started with.
    // An editor still showing the earlier content may render before the refreshed one: wait for the shrink.
    const afterDoc = await graphDocument(page, 'CppCompileError', (chain) => chain[chain.length - 1] < startNodes);
    const endNodes = afterDoc.chain[afterDoc.chain.length - 1];
    h.log(`graph after: ${afterDoc.chain.join(' -> ')} nodes`);
    assert.ok(endNodes < startNodes, `graph shrank: ${startNodes} -> ${endNodes}`);
    await h.shot(page, '06-graph-after');
  });
});

test('untrusted: listed, nothing runs; trusted: reproduced; minify cancelled from the status bar', { timeout: 10 * 60_000 }, async () => {
  // 24 residual blocks: compiling the whole graph alone takes long enough to cancel the job reliably.
  const dump = h.makeWorkspace('untrusted', { reproduce: false, model: 'residual', blocks: 24 });
  const before = new Set(readdirSync(dump.minifierDir));
  const cs = await h.startCodeServer(dump.ws, { settings: { 'aoti.python': h.PYTHON }, trust: false, label: 'untrusted' });
  await inWorkbench(dump.ws, cs, 'untrusted', async (page) => {
    await h.openWorkbench(page, cs.folderUrl);
    await openFailuresView(page);
    const rows = await h.until('the tree to list the failure and the Restricted Mode notice', async () => {
      const r = await h.treeRows(page);
      return r.some((t) => /Restricted Mode/.test(t)) && r.some((t) => /found|AOTI failure/.test(t)) ? r : null;
    }, { timeout: 90_000 });
    h.log(`untrusted tree: ${JSON.stringify(rows)}`);

    // Minify is refused with an explanation, and nothing runs.
    const failureRow = rows.find((t) => !/Restricted Mode/.test(t)).split('\n')[0];
    await contextAction(page, failureRow, 'Minify');
    const toast = page.locator('.notifications-toasts .notification-toast', { hasText: /untrusted/ }).first();
    await toast.waitFor({ timeout: 20_000 });
    await openProblems(page);
    await new Promise((r) => setTimeout(r, 5000));
    await h.shot(page, '07-untrusted');
    const now = readdirSync(dump.minifierDir).filter((f) => !before.has(f));
    assert.deepEqual(now, [], `nothing may be written in an untrusted workspace, found ${now}`);

    // Granting trust reaches the server (didChangeConfiguration): autoReproduce now runs the failure.
    await h.runCommand(page, 'Manage Workspace Trust');
    const trust = page.locator('.workspace-trust-editor .monaco-button', { hasText: /^Trust/ }).first();
    await trust.waitFor({ timeout: 20_000 });
    await trust.click();
    await h.until('the failure to be reproduced once trusted', async () => {
      const r = await h.treeRows(page);
      return !r.some((t) => /Restricted Mode/.test(t)) && r.some((t) => SIGNATURE.test(t) && /reproduced/.test(t));
    }, { timeout: 180_000, interval: 1000 });
    assert.ok(existsSync(join(dump.minifierDir, 'failure.json')), 'failure.json written after trust was granted');
    await h.shot(page, '09-trusted');

    // Minify, then cancel from the status-bar item: the job stops and leaves no process behind.
    await contextAction(page, 'CppCompileError', 'Minify');
    const status = page.locator('.statusbar-item', { hasText: 'AOTI: minifying' }).first();
    await status.waitFor({ timeout: 60_000 });
    await h.shot(page, '10-minifying-status');
    await status.click();
    const pick = page.locator('.quick-input-widget .monaco-list-row', { hasText: 'Cancel' }).first();
    await pick.waitFor({ timeout: 10_000 });
    await pick.click();
    await h.until('the job to be cancelled', async () => (await h.treeRows(page)).some((t) => /cancelled/.test(t)), { timeout: 60_000 });
    await h.until('the status-bar item to go', async () => !(await status.isVisible()), { timeout: 20_000 });
    const jobs = () => h.processesIn(dump.ws).filter((p) => !/code-server/.test(p.cmdline)); // code-server's own cmdline names the folder
    const left = await h.until('the minifier processes to end', async () => (jobs().length === 0 ? [] : null), { timeout: 30_000 }).catch(() => jobs());
    assert.deepEqual(left, [], `processes left after cancel: ${JSON.stringify(left)}`);
    await h.shot(page, '11-cancelled');
  });
});

test('an interpreter without aoti-lens: one actionable notification, no retry loop; then a server of another protocol', { timeout: 5 * 60_000 }, async () => {
  const ws = mkdtempSync(join(tmpdir(), 'aoti-e2e-badpy-'));
  const venv = join(ws, '.bare-venv'); // a Python without aoti-lens (and without pip or torch)
  execFileSync('python3', ['-m', 'venv', '--without-pip', venv]);
  const python = join(venv, 'bin', 'python');
  // The extension of a newer release: once the interpreter is fixed, its server speaks an older protocol.
  const server = Number(/PROTOCOL_VERSION = (\d+)/.exec(readFileSync(join(h.ROOT, 'vscode-client', 'src', 'protocol.ts'), 'utf8'))[1]);
  const vsix = await h.vsixSpeaking(server + 1);
  const cs = await h.startCodeServer(ws, { settings: { 'aoti.python': python }, label: 'badpy', vsix });
  await inWorkbench(ws, cs, 'badpy', async (page) => {
    await h.openWorkbench(page, cs.folderUrl);
    await openFailuresView(page);
    await h.until('the tree to say the server is not running', async () => (await h.treeRows(page)).some((t) => /Language server not running/.test(t)), { timeout: 60_000 });
    const toasts = page.locator('.notifications-toasts .notification-toast', { hasText: 'aoti-lens' });
    await toasts.first().waitFor({ timeout: 20_000 });
    await new Promise((r) => setTimeout(r, 10_000)); // a retry loop would add notifications by now
    const texts = await toasts.allInnerTexts();
    h.log(`notifications: ${JSON.stringify(texts)}`);
    assert.equal(texts.length, 1, `exactly one notification, got ${texts.length}`);
    assert.match(texts[0], /lacks the language server/);
    assert.ok(texts[0].includes(`${python} -m pip install aoti-lens`), texts[0]);
    assert.match(texts[0], /Copy Command/);
    await h.shot(page, '08-bad-interpreter');

    // "Open Settings" leads to aoti.python; fixing it restarts the server at once (no reload).
    await toasts.first().locator('.monaco-button', { hasText: 'Open Settings' }).click();
    // aoti.python is machine-overridable: in code-server (a remote window) it lives in the Remote tab, which
    // the settings editor renders a moment after it opens on the User tab.
    const remoteTab = page.locator('.settings-editor .settings-tabs-widget .action-label', { hasText: 'Remote' }).first();
    const input = page.locator('.settings-editor .setting-item-contents', { hasText: 'Python' }).locator('input').first();
    await h.until('the aoti.python setting to show', async () => {
      if (await remoteTab.count()) await remoteTab.click();
      return (await input.count()) > 0 && (await input.isVisible());
    }, { timeout: 30_000 });
    await h.shot(page, '12-open-settings');
    await input.fill(h.PYTHON);
    await input.press('Tab');
    await h.until('the server to start with the fixed interpreter', async () => {
      const rows = await h.treeRows(page);
      const welcome = await page.locator('.pane-body', { hasText: 'No AOTI or torch.compile failures found yet' }).count();
      return !rows.some((t) => /Language server not running/.test(t)) && welcome > 0;
    }, { timeout: 60_000 });
    await h.shot(page, '13-interpreter-fixed');

    // The handshake: one notification naming both protocol versions and the command that installs the match.
    const mismatch = page.locator('.notifications-toasts .notification-toast', { hasText: 'does not match this extension' });
    await mismatch.first().waitFor({ timeout: 30_000 });
    await new Promise((r) => setTimeout(r, 5000)); // a second one would show by now
    const said = await mismatch.allInnerTexts();
    h.log(`mismatch: ${JSON.stringify(said)}`);
    assert.equal(said.length, 1, `exactly one mismatch notification, got ${said.length}`);
    assert.ok(said[0].includes(`protocol ${server})`) && said[0].includes(`protocol ${server + 1})`), said[0]);
    assert.ok(said[0].includes(`${h.PYTHON} -m pip install`), said[0]);
    await h.shot(page, '25-protocol-mismatch');
  });
});

const CAPTURED_SCRIPT = `import torch
import torch._inductor.config as inductor_config
from minifier.examples.models import build

inductor_config.cpp.inject_relu_bug_TESTING_ONLY = "compile_error"
model, inputs = build("seed")
with torch.no_grad():
    program = torch.export.export(model, inputs)
    path = torch._inductor.aoti_compile_and_package(program)
    print(torch._inductor.aoti_load_package(path)(*inputs))
`;

test('a minify typed in a terminal while the editor reproduces waits, then shows live; shrink curve; bug report; capture a script from the editor', { timeout: 20 * 60_000 }, async () => {
  const dump = h.makeWorkspace('live', { reproduce: false });
  writeFileSync(join(dump.ws, 'train.py'), CAPTURED_SCRIPT);
  const cs = await h.startCodeServer(dump.ws, { settings: { 'aoti.python': h.PYTHON }, label: 'live' });
  await inWorkbench(dump.ws, cs, 'live', async (page) => {
    await h.openWorkbench(page, cs.folderUrl);
    await openFailuresView(page);
    // A new dump: the editor reproduces it in the background; the dump's lock names that run.
    const lock = join(dump.minifierDir, 'aoti-lens-work', 'lock');
    await h.until('the editor\'s reproduction to hold the dump', async () =>
      existsSync(lock) && /"command":\s*"run"/.test(readFileSync(lock, 'utf8')), { timeout: 90_000, interval: 200 });
    await h.shot(page, '14a-editor-reproducing');

    // 1. Meanwhile the user types the minify PyTorch printed, in a shell outside the editor: it waits for the
    // reproduction (no "another aoti-minify works on this dump"), then the view follows it through the events log.
    const terminal = spawn(h.PYTHON, ['-m', 'minifier', 'minify', dump.launcher, '--workers', '2'], { cwd: dump.ws, stdio: ['ignore', 'ignore', 'pipe'] });
    let said = '';
    terminal.stderr.on('data', (chunk) => { said += chunk; });
    const exited = new Promise((resolve) => terminal.on('exit', resolve));
    const live = await h.until('the tree to show the terminal\'s run', async () =>
      (await h.treeRows(page)).find((t) => /in a terminal \(pid \d+\)/.test(t)), { timeout: 60_000, interval: 300 });
    h.log(`live row: ${JSON.stringify(live)}`);
    await h.shot(page, '14-terminal-minify-live');
    const done = await h.until('the terminal\'s minify to end', async () => (await h.treeRows(page)).find((t) => /minimized/.test(t)), { timeout: MINIFY_TIMEOUT, interval: 1000 });
    h.log(`after: ${JSON.stringify(done)}`);
    assert.equal(await exited, 0, said.slice(-3000));
    assert.match(said, /is reproducing this dump: waiting for it, then using its result/);
    await openProblems(page);
    await page.locator('.markers-panel .monaco-list-row', { hasText: /minimal repro/ }).first().waitFor({ timeout: 60_000 });
    await h.shot(page, '15-terminal-minify-repro');

    // 2. The shrink curve, as a Markdown preview the server opens.
    await contextAction(page, 'CppCompileError', 'Show the shrink curve');
    const preview = page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
    await h.until('the rendered shrink curve', async () => (await preview.locator('img[alt*="shrink curve"]').count()) > 0, { timeout: 60_000 });
    await new Promise((r) => setTimeout(r, 1500));
    await h.shot(page, '16-shrink-curve');

    // 3. Prepare a PyTorch bug report: report.md beside repro.py, opened.
    await contextAction(page, 'CppCompileError', 'Prepare a PyTorch bug report');
    await h.until('report.md to open', async () => /report\.md/.test(await h.activeTabTitle(page)), { timeout: 120_000 });
    const report = readFileSync(join(dump.minifierDir, 'report.md'), 'utf8');
    assert.match(report, /### Versions/);
    assert.match(report, /CppCompileError/);
    await h.shot(page, '17-bug-report');

    // 4. Capture: the script's code lens, then the command; the failure reaches the tree as it is dumped.
    await page.keyboard.press('Escape');
    await page.locator('.editor-group-container.active .monaco-editor').first().click();
    await page.keyboard.press('Control+P');
    const quickOpen = page.locator('.quick-input-widget input');
    await quickOpen.waitFor({ state: 'visible', timeout: 10_000 });
    await quickOpen.fill('train.py');
    await page.locator('.quick-input-widget .monaco-list-row', { hasText: 'train.py' }).first().click({ timeout: 20_000 });
    await h.until('train.py to open', async () => /train\.py/.test(await h.activeTabTitle(page)), { timeout: 30_000 });
    const lens = page.locator('.codelens-decoration', { hasText: 'Capture AOTI failures of this script' }).first();
    await lens.waitFor({ timeout: 60_000 });
    await h.shot(page, '18-capture-code-lens');
    await lens.locator('a').first().click();
    await h.until('the capture terminal', async () => (await page.locator('.terminal-tab, .single-terminal-tab, .tabs-list .monaco-list-row', { hasText: /aoti-lens capture/ }).count()) > 0
      || (await page.locator('.panel .pane-header, .panel .composite-bar', { hasText: /aoti-lens capture/ }).count()) > 0, { timeout: 60_000 }).catch(() => undefined);
    const captured = await h.until('the captured failure, reproduced', async () =>
      (await h.treeRows(page)).find((t) => /capture1/.test(t) || (SIGNATURE.test(t) && /reproduced/.test(t))), { timeout: 300_000, interval: 2000 });
    h.log(`captured: ${JSON.stringify(captured)}`);
    assert.ok(existsSync(join(dump.ws, 'torch_compile_debug')), 'capture dumped into the workspace');
    await h.shot(page, '19-captured');
  });
});

// A real Inductor bug of torch 2.13's CPU backend (index_put mask fused into softmax: codegen KeyError) in
// torch.nn's smallest model; the user's script compiles it with aoti_compile_and_package.
const COMPILE_SCRIPT = [
  'import torch',
  '',
  'ep = torch.export.export(model, (x,))',
  "path = torch._inductor.aoti_compile_and_package(ep, package_path='model.pt2')",
  '',
].join('\n');

test('find a workaround from the tree; the verified configs as a quick fix on the compile call', { timeout: 20 * 60_000 }, async () => {
  const dump = h.makeWorkspace('workaround', { workload: 'nn-mlp-index_put_mask-keyerror' });
  const script = join(dump.ws, 'compile.py');
  writeFileSync(script, COMPILE_SCRIPT);
  const cs = await h.startCodeServer(dump.ws, { settings: { 'aoti.python': h.PYTHON, 'aoti.autoReproduce': false }, label: 'workaround' });
  await inWorkbench(dump.ws, cs, 'workaround', async (page) => {
    await h.openWorkbench(page, cs.folderUrl);
    await openFailuresView(page);
    await h.until('the failure in the tree', async () => (await h.treeRows(page)).find((t) => /KeyError/.test(t)), { timeout: 90_000 });

    // 1. Find a workaround: minified first (no repro.py yet), then configs tried and checked on the original.
    await contextAction(page, 'KeyError', 'Find a workaround');
    const triageJson = join(dump.minifierDir, 'triage.json');
    await h.until('triage.json', async () => existsSync(triageJson), { timeout: MINIFY_TIMEOUT * 2, interval: 2000 });
    const triage = JSON.parse(readFileSync(triageJson, 'utf8'));
    h.log(`triaged: ${JSON.stringify(triage.workarounds)} culprit ${triage.culprit.subsystem}`);
    assert.ok(triage.workarounds.length > 0, 'triage.json lists the verified workaround');
    await h.until('the row to settle', async () => (await h.treeRows(page)).find((t) => /KeyError/.test(t) && /minimized/.test(t)), { timeout: 60_000 });
    await h.shot(page, '20-workaround-found');

    // 2. The user's compile call: a diagnostic, and the quick fix that adds the verified configs.
    await page.keyboard.press('Escape');
    await page.keyboard.press('Control+P');
    const quickOpen = page.locator('.quick-input-widget input');
    await quickOpen.waitFor({ state: 'visible', timeout: 10_000 });
    await quickOpen.fill('compile.py');
    await page.locator('.quick-input-widget .monaco-list-row', { hasText: 'compile.py' }).first().click({ timeout: 20_000 });
    await h.until('compile.py to open', async () => /compile\.py/.test(await h.activeTabTitle(page)), { timeout: 30_000 });
    await openProblems(page);
    const row = page.locator('.markers-panel .monaco-list-row', { hasText: /compiles with inductor_configs/ }).first();
    await row.waitFor({ timeout: 60_000 });
    await h.shot(page, '21-workaround-diagnostic');
    await row.click();
    // the quick fix is the editor's: the cursor on the call, then Ctrl+.
    await page.locator('.editor-group-container.active .view-line', { hasText: 'aoti_compile_and_package' }).first().click();
    await page.keyboard.press('Control+.');
    const fix = page.locator('.action-widget .monaco-list-row', { hasText: /verified workaround/ }).first();
    await fix.waitFor({ state: 'visible', timeout: 30_000 });
    await h.shot(page, '22-workaround-quick-fix');
    // the preferred fix is the focused row (a pointer block covers the widget a moment after it opens)
    await h.until('the workaround to be the focused fix', async () => /focused/.test(await fix.getAttribute('class')), { timeout: 10_000 });
    await page.keyboard.press('Enter');
    const configs = Object.keys(triage.workarounds[0].inductor_configs)[0];
    await h.until('the edited call', async () => (await h.activeEditorText(page)).includes(`inductor_configs={'${configs}'`), { timeout: 30_000 });
    await h.shot(page, '23-workaround-applied');
    // saved, the call passes the workaround: its diagnostic goes
    await page.keyboard.press('Control+S');
    await h.until('the saved file', async () => readFileSync(script, 'utf8').includes(`inductor_configs={'${configs}'`), { timeout: 30_000 });
    await h.until('the workaround diagnostic to go', async () =>
      (await page.locator('.markers-panel .monaco-list-row', { hasText: /compiles with inductor_configs/ }).count()) === 0, { timeout: 30_000 });
    await h.shot(page, '24-workaround-saved');
  });
});
