// VS Code settings -> the server's `Settings` (initializationOptions and didChangeConfiguration). No vscode import.
import * as os from 'node:os';
import { DEFAULT_SETTINGS, SETTINGS_SECTION, type Settings } from './protocol';

/** What the extension reads from `vscode.workspace.getConfiguration(SETTINGS_SECTION)`. */
export interface ConfigReader {
  get<T>(key: string): T | undefined;
}

export interface Vars {
  workspaceFolder?: string;
  home?: string;
}

/** Expands `${workspaceFolder}`, `${userHome}` and a leading `~`; other text is kept. */
export function expandVars(value: string, vars: Vars = {}): string {
  const home = vars.home ?? os.homedir();
  let out = value.trim();
  if (out === '~' || out.startsWith('~/')) out = home + out.slice(1);
  out = out.replace(/\$\{userHome\}/g, home);
  if (vars.workspaceFolder !== undefined) out = out.replace(/\$\{workspaceFolder\}/g, vars.workspaceFolder);
  return out;
}

function positiveNumber(value: unknown, integer: boolean): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) return undefined;
  return integer ? Math.max(1, Math.floor(value)) : value;
}

/**
 * Builds the server's Settings. Unset or invalid values are left out so that the server's own
 * defaults apply. `python` is the interpreter the server was started with (already resolved).
 * VS Code's variables are expanded here; relative debugDirRoots are left to the server, which
 * resolves them for every editor.
 */
export function buildSettings(config: ConfigReader, python: string | undefined, trusted: boolean, vars: Vars = {}): Settings {
  const settings: Settings = { trusted };
  if (python) settings.python = python;
  const workers = positiveNumber(config.get('workers'), true);
  if (workers !== undefined) settings.workers = workers;
  const devices = config.get<unknown>('devices');
  if (typeof devices === 'string' && devices.trim()) settings.devices = devices.replace(/\s+/g, '');
  const timeout = positiveNumber(config.get('timeout'), false);
  if (timeout !== undefined) settings.timeout = timeout;
  const keepWarm = config.get<unknown>('keepWarm');
  if (typeof keepWarm === 'number' && Number.isFinite(keepWarm) && keepWarm >= 0) settings.keepWarm = keepWarm;
  const roots = config.get<unknown>('debugDirRoots');
  if (Array.isArray(roots)) {
    const clean = roots.filter((r): r is string => typeof r === 'string' && r.trim() !== '').map((r) => expandVars(r, vars));
    if (clean.length) settings.debugDirRoots = clean;
  }
  const imports = config.get<unknown>('imports');
  if (Array.isArray(imports)) {
    const modules = imports.filter((m): m is string => typeof m === 'string' && m.trim() !== '').map((m) => m.trim());
    if (modules.length) settings.imports = modules;
  }
  const capture = config.get<unknown>('captureCommand');
  if (typeof capture === 'string' && capture.trim()) settings.captureCommand = capture.trim();
  const auto = config.get<unknown>('autoReproduce');
  settings.autoReproduce = typeof auto === 'boolean' ? auto : DEFAULT_SETTINGS.autoReproduce;
  return settings;
}

/**
 * The answer to the server's `workspace/configuration` request: VS Code's answer with the `aoti`
 * section of each item replaced by the Settings the extension sends for that item's scope (its
 * folder's settings and interpreter, the window's trust).
 */
export function configurationAnswer<T>(answer: T, items: readonly { section?: string }[], settings: readonly Settings[]): T | unknown[] {
  if (!Array.isArray(answer)) return answer;
  return (answer as unknown[]).map((value: unknown, i): unknown => {
    const section = items[i]?.section;
    if (section === SETTINGS_SECTION) return settings[i];
    if (!section) return { ...(value ?? {}), [SETTINGS_SECTION]: settings[i] };
    return value;
  });
}
