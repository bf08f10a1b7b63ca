// Which Python runs the server, and whether it can: the aoti.python setting, else the Python
// extension's active interpreter, else python3; then a probe. Imports only vscode's types, so it is
// unit-tested under plain node.
import { execFile } from 'node:child_process';
import type { Disposable, Event, Extension, Uri } from 'vscode';
import { expandVars, type Vars } from './settings';

export const PYTHON_EXTENSION_ID = 'ms-python.python';

/** The part of the Python extension's API used here (its environments API, else the older settings one). */
export interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath?(resource?: Uri): { path: string } | undefined;
    resolveEnvironment?(env: unknown): Promise<{ executable?: { uri?: Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: Event<unknown>;
  };
  settings?: { getExecutionDetails?(resource?: Uri): { execCommand?: string[] } };
}

/** The Python extension's active interpreter, and a call to `onChange` when the user picks another. */
export class PythonExtension implements Disposable {
  private listener: Disposable | undefined;

  constructor(
    private readonly find: () => Extension<PythonExtensionApi> | undefined,
    private readonly onChange: () => void,
  ) {}

  /** Undefined when the extension is not installed or names no interpreter. */
  async interpreter(resource?: Uri): Promise<string | undefined> {
    const ext = this.find();
    if (!ext) return undefined;
    const api = ext.isActive ? ext.exports : await ext.activate();
    this.listener ??= api?.environments?.onDidChangeActiveEnvironmentPath?.(() => this.onChange());
    const envs = api?.environments;
    if (envs?.getActiveEnvironmentPath) {
      const active = envs.getActiveEnvironmentPath(resource);
      const resolved = active && envs.resolveEnvironment ? await envs.resolveEnvironment(active) : undefined;
      return resolved?.executable?.uri?.fsPath ?? active?.path;
    }
    return api?.settings?.getExecutionDetails?.(resource)?.execCommand?.[0];
  }

  dispose(): void {
    this.listener?.dispose();
  }
}

export type InterpreterSource = 'setting' | 'python-extension' | 'default';

export interface Interpreter {
  command: string;
  source: InterpreterSource;
}

export const DEFAULT_PYTHON = 'python3';

/**
 * Resolution order: the `aoti.python` setting, else the Python extension's active interpreter
 * (when that extension is installed and answers), else `python3`.
 */
export async function resolveInterpreter(
  setting: string | undefined,
  fromPythonExtension: () => Promise<string | undefined>,
  vars: Vars = {},
): Promise<Interpreter> {
  if (typeof setting === 'string' && setting.trim()) {
    return { command: expandVars(setting, vars), source: 'setting' };
  }
  let fromExt: string | undefined;
  try {
    fromExt = await fromPythonExtension();
  } catch {
    fromExt = undefined;
  }
  if (fromExt && fromExt.trim()) return { command: fromExt.trim(), source: 'python-extension' };
  return { command: DEFAULT_PYTHON, source: 'default' };
}

export type ProbeStatus = 'ok' | 'no-interpreter' | 'no-server' | 'broken';

export interface Probe {
  status: ProbeStatus;
  /** torch importable (find_spec; torch is not imported, that takes seconds). */
  torch: boolean;
  executable?: string;
  version?: string;
  detail: string;
}

// Imports the server's packages for real (a broken install fails here, not later) but only
// looks torch up. Runs with a neutral cwd, so a workspace folder named `server` is not imported.
export const PROBE_SCRIPT = [
  'import importlib.util, json, sys',
  'r = {"executable": sys.executable, "version": sys.version.split()[0], "server": False, "error": ""}',
  'try:',
  '    import server, pygls',
  '    if getattr(server, "__file__", None) is None:',
  '        raise ImportError("server is a namespace package here (%s), not aoti-lens: reinstall aoti-lens" % list(server.__path__))',
  '    r["server"] = True',
  'except BaseException as e:',
  '    r["error"] = "%s: %s" % (type(e).__name__, e)',
  'r["torch"] = importlib.util.find_spec("torch") is not None',
  'print("AOTI_PROBE " + json.dumps(r))',
].join('\n');

/** Interprets what the probe printed (pure, unit-tested). */
export function parseProbe(stdout: string, stderr: string, spawnError?: NodeJS.ErrnoException | null): Probe {
  const line = stdout.split(/\r?\n/).find((l) => l.startsWith('AOTI_PROBE '));
  if (!line) {
    if (spawnError && (spawnError.code === 'ENOENT' || spawnError.code === 'EACCES')) {
      return { status: 'no-interpreter', torch: false, detail: `cannot run it (${spawnError.code})` };
    }
    const tail = (stderr || (spawnError ? String(spawnError.message) : '')).trim().split(/\r?\n/).slice(-3).join(' ');
    return { status: 'broken', torch: false, detail: tail || 'it printed nothing' };
  }
  try {
    const r = JSON.parse(line.slice('AOTI_PROBE '.length)) as Record<string, unknown>;
    const torch = r.torch === true;
    const text = (value: unknown): string => (typeof value === 'string' ? value : '');
    const base = { torch, executable: text(r.executable), version: text(r.version) };
    if (r.server === true) return { status: 'ok', ...base, detail: '' };
    return { status: 'no-server', ...base, detail: text(r.error) || 'cannot import server, pygls' };
  } catch (e) {
    return { status: 'broken', torch: false, detail: `unreadable probe output: ${String(e)}` };
  }
}

export function probeInterpreter(python: string, cwd: string, timeoutMs = 20000): Promise<Probe> {
  return new Promise((resolve) => {
    execFile(
      python,
      ['-c', PROBE_SCRIPT],
      { cwd, timeout: timeoutMs, windowsHide: true, env: { ...process.env, PYTHONIOENCODING: 'utf-8' } },
      (error, stdout, stderr) => resolve(parseProbe(String(stdout), String(stderr), error as NodeJS.ErrnoException | null)),
    );
  });
}

/** Quotes a path for a POSIX shell (or cmd.exe on Windows) when needed. */
export function shellQuote(arg: string, platform: NodeJS.Platform = process.platform): string {
  if (/^[\w@%+=:,./-]+$/.test(arg)) return arg;
  if (platform === 'win32') return `"${arg.replace(/"/g, '""')}"`;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** The command that installs what the probe found missing. */
export function installCommand(python: string, what: 'server' | 'torch', platform: NodeJS.Platform = process.platform): string {
  const pkg = what === 'server' ? 'aoti-lens' : 'torch';
  return `${shellQuote(python, platform)} -m pip install ${pkg}`;
}

/** The one notification text for an interpreter that cannot run the server (null when it can). */
export function probeProblem(python: string, probe: Probe): string | null {
  switch (probe.status) {
    case 'ok':
      return null;
    case 'no-interpreter':
      return `aoti-lens: the Python interpreter "${python}" was not found: ${probe.detail}. Set "aoti.python" to a Python that has aoti-lens installed.`;
    case 'no-server':
      return `aoti-lens: ${python} lacks the language server (${probe.detail}). Run: ${installCommand(python, 'server')} (or pip install -e <aoti-lens checkout>), or set "aoti.python".`;
    case 'broken':
      return `aoti-lens: ${python} failed to start: ${probe.detail}. Set "aoti.python" to a working interpreter.`;
  }
}
