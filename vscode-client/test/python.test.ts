import assert from 'node:assert/strict';
import * as os from 'node:os';
import { test } from 'node:test';
import type { Event, Extension, Uri } from 'vscode';
import {
  DEFAULT_PYTHON,
  PythonExtension,
  type PythonExtensionApi,
  installCommand,
  parseProbe,
  probeInterpreter,
  probeProblem,
  resolveInterpreter,
  shellQuote,
} from '../src/python';

const never = () => Promise.reject(new Error('must not be asked'));

test('the aoti.python setting wins', async () => {
  assert.deepEqual(await resolveInterpreter('/opt/py/bin/python', never), { command: '/opt/py/bin/python', source: 'setting' });
  assert.deepEqual(await resolveInterpreter('${workspaceFolder}/.venv/bin/python', never, { workspaceFolder: '/ws' }), {
    command: '/ws/.venv/bin/python',
    source: 'setting',
  });
});

test('then the Python extension interpreter', async () => {
  assert.deepEqual(await resolveInterpreter('', () => Promise.resolve('/env/bin/python')), { command: '/env/bin/python', source: 'python-extension' });
  assert.deepEqual(await resolveInterpreter(undefined, () => Promise.resolve('/env/bin/python')), { command: '/env/bin/python', source: 'python-extension' });
});

test('else python3 (extension missing, silent or failing)', async () => {
  const fallback = { command: DEFAULT_PYTHON, source: 'default' };
  assert.deepEqual(await resolveInterpreter('  ', () => Promise.resolve(undefined)), fallback);
  assert.deepEqual(await resolveInterpreter(undefined, () => Promise.resolve('')), fallback);
  assert.deepEqual(await resolveInterpreter(undefined, () => Promise.reject(new Error('python extension broke'))), fallback);
});

test('parseProbe: ok, missing server, missing torch', () => {
  const ok = parseProbe('noise\nAOTI_PROBE {"executable": "/v/bin/python", "version": "3.11.7", "server": true, "error": "", "torch": true}\n', '');
  assert.equal(ok.status, 'ok');
  assert.equal(ok.torch, true);
  assert.equal(probeProblem('/v/bin/python', ok), null);

  const noServer = parseProbe('AOTI_PROBE {"server": false, "error": "ModuleNotFoundError: No module named \'server\'", "torch": false}', '');
  assert.equal(noServer.status, 'no-server');
  assert.equal(noServer.torch, false);
  const text = probeProblem('/usr/bin/python3', noServer) ?? '';
  assert.match(text, /lacks the language server/);
  assert.match(text, /\/usr\/bin\/python3 -m pip install aoti-lens/);
});

test('parseProbe: interpreter missing or broken', () => {
  const enoent = Object.assign(new Error('spawn nope ENOENT'), { code: 'ENOENT' });
  const missing = parseProbe('', '', enoent);
  assert.equal(missing.status, 'no-interpreter');
  assert.match(probeProblem('nope', missing) ?? '', /was not found/);
  const broken = parseProbe('', 'Traceback...\nSyntaxError: bad\n', Object.assign(new Error('exit 1'), { code: 1 as unknown as string }));
  assert.equal(broken.status, 'broken');
  assert.match(broken.detail, /SyntaxError/);
});

test('install command quotes odd paths', () => {
  assert.equal(installCommand('/v/bin/python', 'server', 'linux'), '/v/bin/python -m pip install aoti-lens');
  assert.equal(installCommand('/my env/python', 'torch', 'linux'), "'/my env/python' -m pip install torch");
  assert.equal(shellQuote('C:\\Py 3\\python.exe', 'win32'), '"C:\\Py 3\\python.exe"');
});

test('probing a real interpreter without the server, and a missing one', async () => {
  const missing = await probeInterpreter('/nonexistent/bin/python-aoti', os.tmpdir());
  assert.equal(missing.status, 'no-interpreter');
  // The system python3 exists on every machine that runs these tests, but has no aoti-lens.
  const system = await probeInterpreter('python3', os.tmpdir());
  assert.ok(['ok', 'no-server'].includes(system.status), JSON.stringify(system));
  assert.match(system.version ?? '', /^3\./);
});

// The Python extension is not installed where these tests run: a stand-in with its API's shape.
function pythonExtension(api: PythonExtensionApi, active = true) {
  let activated = 0;
  const ext = {
    isActive: active,
    exports: api,
    activate: () => {
      activated += 1;
      return Promise.resolve(api);
    },
  };
  return { ext: ext as unknown as Extension<PythonExtensionApi>, activations: () => activated };
}

test("the Python extension's interpreter: resolved environment, active path, or the older settings API", async () => {
  const uri = (fsPath: string) => ({ fsPath }) as Uri;
  const resolved = pythonExtension({
    environments: { getActiveEnvironmentPath: () => ({ path: '/env' }), resolveEnvironment: () => Promise.resolve({ executable: { uri: uri('/env/bin/python') } }) },
  });
  assert.equal(await new PythonExtension(() => resolved.ext, () => undefined).interpreter(), '/env/bin/python');
  const unresolved = pythonExtension({ environments: { getActiveEnvironmentPath: () => ({ path: '/env/bin/python3' }) } }, false);
  assert.equal(await new PythonExtension(() => unresolved.ext, () => undefined).interpreter(), '/env/bin/python3');
  assert.equal(unresolved.activations(), 1);
  const older = pythonExtension({ settings: { getExecutionDetails: () => ({ execCommand: ['/old/python', '-X'] }) } });
  assert.equal(await new PythonExtension(() => older.ext, () => undefined).interpreter(), '/old/python');
  assert.equal(await new PythonExtension(() => undefined, () => undefined).interpreter(), undefined);
});

test('a new active interpreter calls back, subscribed once', async () => {
  const listeners: (() => void)[] = [];
  const { ext } = pythonExtension({
    environments: {
      getActiveEnvironmentPath: () => ({ path: '/env/bin/python' }),
      onDidChangeActiveEnvironmentPath: ((listener: () => void) => {
        listeners.push(listener);
        return { dispose: () => listeners.splice(listeners.indexOf(listener), 1) };
      }) as unknown as Event<unknown>,
    },
  });
  let changes = 0;
  const python = new PythonExtension(() => ext, () => (changes += 1));
  await python.interpreter();
  await python.interpreter();
  assert.equal(listeners.length, 1);
  listeners[0]();
  assert.equal(changes, 1);
  python.dispose();
  assert.equal(listeners.length, 0);
});
