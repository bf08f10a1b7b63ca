// Helpers of the end-to-end test: a real CPU AOTI dump, code-server with the built .vsix, and
// Debian's Chromium driven by playwright-core. Installed by .ci/e2e-setup.sh.
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const PYTHON = join(ROOT, '.venv', 'bin', 'python');
export const CODE_SERVER = join(ROOT, 'tests', 'e2e', 'node_modules', '.bin', 'code-server');
export const VSIX = join(ROOT, 'dist', 'aoti-lens.vsix');
export const ARTIFACTS = join(ROOT, '.artifacts', 'e2e');
export const CHROMIUM = process.env.AOTI_E2E_CHROMIUM || '/usr/bin/chromium';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function log(...args) {
  console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...args);
}

export function checkPrerequisites() {
  const missing = [];
  if (!existsSync(PYTHON)) missing.push(`${PYTHON} (the project's venv)`);
  if (!existsSync(CODE_SERVER)) missing.push(`${CODE_SERVER} (run .ci/e2e-setup.sh)`);
  if (!existsSync(CHROMIUM)) missing.push(`${CHROMIUM} (run .ci/e2e-setup.sh)`);
  if (missing.length) throw new Error(`e2e prerequisites missing:\n  ${missing.join('\n  ')}`);
}

function run(cmd, args, opts = {}) {
  const started = Date.now();
  const res = spawnSync(cmd, args, { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (res.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} exited ${res.status}${res.error ? ` (${res.error.message})` : ''}\n${(res.stdout || '').slice(-3000)}\n${(res.stderr || '').slice(-3000)}`);
  }
  log(`${[cmd, ...args].join(' ').slice(0, 140)}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return res.stdout;
}

/** Builds dist/aoti-lens.vsix from the current sources. */
export function buildVsix() {
  run('npm', ['run', '--silent', 'package']);
  if (!existsSync(VSIX)) throw new Error(`${VSIX} was not built`);
}

// Rewrites one member of a zip (the .vsix): python's zipfile, as no zip tool is assumed.
const ZIP_REPLACE = `import sys, zipfile
src, dst, name, path = sys.argv[1:]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        zout.writestr(item, open(path, "rb").read() if item.filename == name else zin.read(item.filename))
`;

/** The built .vsix, its client speaking protocol `version`: an extension of another aoti-lens release. Only the
 *  bundle differs (built from the same sources, protocol.ts's PROTOCOL_VERSION replaced as it is read). */
export async function vsixSpeaking(version) {
  const esbuild = await import('esbuild');
  const dir = mkdtempSync(join(tmpdir(), 'aoti-e2e-vsix-'));
  const bundle = join(dir, 'extension.js');
  const speaking = {
    name: 'protocol-version',
    setup(build) {
      build.onLoad({ filter: /[\\/]protocol\.ts$/ }, (args) => ({
        loader: 'ts',
        contents: readFileSync(args.path, 'utf8').replace(/PROTOCOL_VERSION = \d+/, `PROTOCOL_VERSION = ${version}`),
      }));
    },
  };
  await esbuild.build({
    entryPoints: [join(ROOT, 'vscode-client', 'src', 'extension.ts')],
    outfile: bundle,
    bundle: true, platform: 'node', target: 'node20', format: 'cjs', external: ['vscode'], mainFields: ['module', 'main'],
    logLevel: 'warning',
    plugins: [speaking],
  });
  const vsix = join(dir, 'aoti-lens.vsix');
  run(PYTHON, ['-c', ZIP_REPLACE, VSIX, vsix, 'extension/dist/extension.js', bundle]);
  return vsix;
}

/** A workspace holding a real CPU AOTI failure dumped by PyTorch (and, if asked, failure.json). */
export function makeWorkspace(name, { reproduce = true, model = 'seed', blocks = 6, workload = null } = {}) {
  const ws = join(tmpdir(), `aoti-e2e-${name}-${process.pid}`);
  rmSync(ws, { recursive: true, force: true });
  mkdirSync(ws, { recursive: true });
  const kind = workload
    ? ['--workload', workload]
    : ['--model', model, '--blocks', String(blocks), '--bug', 'compile_error', '--device', 'cpu'];
  const out = run(PYTHON, ['-m', 'minifier.examples.dump', '--out', ws, ...kind]);
  const launcher = out.trim().split('\n').pop();
  if (!launcher || !existsSync(launcher)) throw new Error(`no launcher dumped: ${out}`);
  if (reproduce) run(PYTHON, ['-m', 'minifier', 'run', launcher]);
  const runDir = dirname(dirname(launcher));
  return { ws, launcher, runDir, id: runDir.split('/').pop(), minifierDir: dirname(launcher) };
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts code-server on the workspace with the .vsix installed and the given user settings.
 * trust=false leaves workspace trust on (the folder opens in Restricted Mode).
 */
export async function startCodeServer(workspace, { settings = {}, trust = true, label = 'main', vsix = VSIX } = {}) {
  const base = mkdtempSync(join(tmpdir(), `aoti-e2e-cs-${label}-`));
  const dirs = {
    base,
    userData: join(base, 'user-data'),
    extensions: join(base, 'extensions'),
    config: join(base, 'config.yaml'),
  };
  mkdirSync(join(dirs.userData, 'User'), { recursive: true });
  mkdirSync(dirs.extensions, { recursive: true });
  writeFileSync(dirs.config, 'auth: none\ncert: false\n');
  const settingsFile = join(dirs.userData, 'User', 'settings.json');
  const allSettings = {
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'workbench.enableExperiments': false,
    'telemetry.telemetryLevel': 'off',
    'update.mode': 'none',
    'extensions.autoCheckUpdates': false,
    'extensions.autoUpdate': false,
    'extensions.ignoreRecommendations': true,
    'security.workspace.trust.startupPrompt': 'never',
    'security.workspace.trust.emptyWindow': false,
    'window.commandCenter': false,
    'chat.commandCenter.enabled': false,
    'workbench.colorTheme': 'Default Dark Modern',
    ...settings,
  };
  writeFileSync(settingsFile, JSON.stringify(allSettings, null, 2));
  const env = {
    ...process.env,
    XDG_CONFIG_HOME: join(base, 'xdg-config'),
    XDG_DATA_HOME: join(base, 'xdg-data'),
    XDG_CACHE_HOME: join(base, 'xdg-cache'),
  };
  delete env.VSCODE_IPC_HOOK_CLI;
  const common = ['--config', dirs.config, '--user-data-dir', dirs.userData, '--extensions-dir', dirs.extensions];
  run(CODE_SERVER, [...common, '--install-extension', vsix], { env });

  const port = await freePort();
  const logFile = join(base, 'code-server.log');
  const logStream = createWriteStream(logFile);
  const args = [
    ...common,
    '--bind-addr', `127.0.0.1:${port}`,
    '--auth', 'none',
    '--disable-telemetry',
    '--disable-update-check',
    '--disable-getting-started-override',
    ...(trust ? ['--disable-workspace-trust'] : []),
    workspace,
  ];
  // Own process group: the extension host and the language server are killed with it.
  const child = spawn(CODE_SERVER, args, { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(logStream);
  child.stderr.pipe(logStream);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`code-server exited ${child.exitCode}; see ${logFile}`);
    try {
      const res = await fetch(`${url}/healthz`);
      if (res.ok) break;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) throw new Error(`code-server did not answer /healthz in 60 s; see ${logFile}`);
    await sleep(250);
  }
  log(`code-server up at ${url} (${label})`);
  return {
    url,
    dirs,
    logFile,
    folderUrl: `${url}/?folder=${encodeURIComponent(workspace)}`,
    /** Removes what this run left in the temporary folder (kept when a test failed, to look at). */
    cleanup() {
      rmSync(base, { recursive: true, force: true });
    },
    async stop() {
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        /* gone */
      }
      for (let i = 0; i < 40 && child.exitCode === null && child.signalCode === null; i++) await sleep(100);
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
      killStragglers(workspace);
      logStream.end();
    },
  };
}

/** Pids of processes (other than this one) whose command line or cwd is inside `folder`. */
export function processesIn(folder) {
  const found = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (Number(pid) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      if (cmdline.includes(folder) || cwd.startsWith(folder)) found.push({ pid: Number(pid), cmdline });
    } catch {
      /* gone */
    }
  }
  return found;
}

/**
 * The minifier runs its jobs in their own process groups: kill any process still working on this
 * test's (unique, temporary) workspace, by pid.
 */
export function killStragglers(workspace) {
  for (const { pid, cmdline } of processesIn(workspace)) {
    try {
      process.kill(pid, 'SIGKILL');
      log(`killed straggler ${pid}: ${cmdline.slice(0, 120)}`);
    } catch {
      /* gone */
    }
  }
}

export async function launchBrowser() {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  });
}

/** Screenshots go to .artifacts/e2e/<name>.png; returns the path. */
export async function shot(page, name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const file = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path: file });
  log(`screenshot ${file}`);
  return file;
}

/** Polls fn until it returns a truthy value; fails with the last value seen. */
export async function until(what, fn, { timeout = 60_000, interval = 500 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout / 1000} s waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await sleep(interval);
  }
}

// ---- workbench helpers ------------------------------------------------------------------------

export async function openWorkbench(page, url) {
  await page.goto(url);
  await page.waitForSelector('.monaco-workbench', { timeout: 90_000 });
  // Let the workbench settle (extensions activate, the first layout pass ends).
  await sleep(2000);
}

/** Runs a command through the palette by its title as shown there. */
export async function runCommand(page, title) {
  await page.keyboard.press('Escape');
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: 10_000 });
  await input.fill(`>${title}`);
  const row = page.locator('.quick-input-widget .monaco-list-row', { hasText: title }).first();
  await row.waitFor({ state: 'visible', timeout: 10_000 });
  await sleep(300);
  await page.keyboard.press('Enter');
}

/** The visible rows of the Inductor Failures tree, as text. */
export async function treeRows(page) {
  return page.locator('.pane:has(.pane-header[aria-label*="Inductor Failures"]) .monaco-list-row').allInnerTexts();
}

export function treeRow(page, text) {
  return page.locator('.pane:has(.pane-header[aria-label*="Inductor Failures"]) .monaco-list-row', { hasText: text }).first();
}

export async function problemRows(page) {
  return page.locator('.markers-panel .monaco-list-row').allInnerTexts();
}

/** Clicks an entry of the context menu VS Code opened (menus live in a shadow root; playwright pierces it). */
export async function clickMenuItem(page, label) {
  const item = page.locator('.monaco-menu .action-item .action-label', { hasText: label }).first();
  await item.waitFor({ state: 'visible', timeout: 10_000 });
  // A VS Code menu ignores the mouse for a moment after it opens (so the right-click's own release
  // does not pick an entry): hover first, then click.
  await item.hover();
  await sleep(500);
  await item.click();
}

/** Text of the active editor (the visible lines; editors render only what is on screen). */
export async function activeEditorText(page) {
  return page.locator('.editor-group-container.active .monaco-editor .view-lines').first().innerText();
}

export async function activeTabTitle(page) {
  return page.locator('.editor-group-container.active .tab.active').first().innerText();
}
